"""How a run starts, shared by train.py, eval.py, export.py and predict.py:
flags and one-line errors (`cli`), a run's config and its history
(`run_config`, `config_history`), the config checked before the run
(`validate`), quiet library logging and the native stderr filter (`logs`,
`stderr_filter`)."""
