"""`dapo-ops audit`: fleet firmware / driver / CANN / Python-stack drift and per-NPU health."""
