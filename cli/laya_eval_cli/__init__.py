"""Command-line front end of laya-eval (entry point ``laya-eval``)."""
