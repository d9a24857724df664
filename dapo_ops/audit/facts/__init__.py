"""One module per audit fact (each defines FACT); see dapo_ops.audit.fact."""
