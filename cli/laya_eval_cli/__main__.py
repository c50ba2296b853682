"""``python -m laya_eval_cli``: the same command group as the ``laya-eval`` entry point."""

from laya_eval_cli.main import cli

if __name__ == "__main__":
    cli(prog_name="laya-eval")
