"""All ``laya-eval`` subcommands, in the order ``--help`` lists them."""

from laya_eval_cli.commands.faithfulness import faithfulness
from laya_eval_cli.commands.info import info
from laya_eval_cli.commands.train import train

ALL = [train, faithfulness, info]
