"""NPU telemetry across a fleet: npu-smi sampled over kept-open SSH connections, alerts with the seed's causes,
npu-exporter's Prometheus names, and a run's hardware record (what `top` and `watch` sample, `report` plots)."""
