"""`dapo-ops report`: a DAPO run's metrics from verl's console log (and its file logger's JSONL when there is one),
summarised as a table, JSON, PNG plots and one self-contained HTML page.

steps.py parses (pure), summary.py computes the numbers (pure), plots.py and html.py draw, fetch.py brings a run's
logs from its head over SSH."""
