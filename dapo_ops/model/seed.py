"""The source blog post's performance table (section 6.2, "在两机32卡的配置下", 2 nodes with 32 NPUs): the baseline
`report` compares a run with, and the throughput the checkpoint policy turns minutes into steps with."""

SEED_STEP_TIME_S = 1.2
SEED_TOKENS_PER_S = 12_800.0
SEED_NPUS = 32
SEED_TOKENS_PER_S_PER_NPU = SEED_TOKENS_PER_S / SEED_NPUS
