"""``python -m laya_eval_cli`` runs the ``laya-eval`` command line (also under torchrun)."""

from laya_eval_cli.main import cli

if __name__ == "__main__":
    cli(prog_name="laya-eval")
