"""The declarative checks: one message template naming the option, what was expected and what arrived."""

from __future__ import annotations

import re

import pytest

from laya_eval.checks import (
    SEED_MAX,
    check_choice,
    check_fields,
    check_int,
    check_non_negative_int,
    check_number,
    check_optional,
    check_positive_int,
    check_seed,
    is_int,
    offset_seed,
)
from laya_eval.errors import ConfigError


def _raises(message: str):
    return pytest.raises(ConfigError, match="^" + re.escape(message) + "$")


def test_positive_int_message_names_the_value():
    with _raises("batch_size must be a positive integer; got 0."):
        check_positive_int("batch_size", 0)
    with _raises("batch_size must be a positive integer; got '3'."):
        check_positive_int("batch_size", "3")
    with _raises("batch_size must be a positive integer; got 2.0."):
        check_positive_int("batch_size", 2.0)
    assert check_positive_int("batch_size", 1) == 1


def test_non_negative_int_admits_zero_only_from_below():
    assert check_non_negative_int("bootstrap", 0) == 0
    with _raises("bootstrap must be a non-negative integer; got -1."):
        check_non_negative_int("bootstrap", -1)


@pytest.mark.parametrize("check", [check_positive_int, check_non_negative_int, check_seed, check_int])
@pytest.mark.parametrize("value", [True, False])
def test_bools_are_refused_as_ints(check, value):
    with pytest.raises(ConfigError, match=f"; got {value}\\.$"):
        check("n", value)
    assert not is_int(value) and is_int(1) and not is_int(1.0)


def test_int_bounds_are_closed_and_worded():
    assert check_int("k", 2, low=2, high=5) == 2 and check_int("k", 5, low=2, high=5) == 5
    with _raises("k must be an integer from 2 to 5; got 6."):
        check_int("k", 6, low=2, high=5)
    with _raises("k must be an integer from 2 to 5; got 1."):
        check_int("k", 1, low=2, high=5)
    with _raises("k must be an integer >= 2; got 1."):
        check_int("k", 1, low=2)
    with _raises("k must be an integer <= 5; got 6."):
        check_int("k", 6, high=5)
    with _raises("k must be an integer; got 'x'."):
        check_int("k", "x")


def test_seed_range_is_zero_to_two_to_the_63_minus_one():
    assert SEED_MAX == 9223372036854775807  # the largest signed 64-bit integer
    assert check_seed("seed", 0) == 0 and check_seed("seed", SEED_MAX) == SEED_MAX
    with _raises("seed must be an integer from 0 to 2**63 - 1; got 9223372036854775808."):
        check_seed("seed", 2**63)
    with _raises("seed must be an integer from 0 to 2**63 - 1; got -1."):
        check_seed("seed", -1)


def test_offset_seeds_wrap_into_the_range_and_are_unchanged_below_it():
    assert [offset_seed(5, r) for r in range(3)] == [5, 6, 7]
    assert [offset_seed(9223372036854775806, r) for r in range(3)] == [9223372036854775806, 9223372036854775807, 0]


def test_every_seed_takes_the_same_range():
    """The CLI's --seed, evaluation, training and sanity options, and a sweep's seeds accept SEED_MAX and refuse
    one more, with the same words."""
    from tests.cli_helpers import run
    from laya_eval.engine.plan import EvalOptions
    from laya_eval.sanity_checks.options import SanityOptions
    from laya_eval.sweeps.config import load_config
    from laya_eval.training.trainer import TrainOptions

    for make in (EvalOptions, TrainOptions, SanityOptions):
        assert make(seed=9223372036854775807).seed == 9223372036854775807
        with _raises(f"{make.__name__}.seed must be an integer from 0 to 2**63 - 1; got 9223372036854775808."):
            make(seed=9223372036854775808)
    grid = {"grid": {"datasets": ["digits"], "heads": ["laya"], "backbones": [{"name": "mlp"}], "seeds": [2**63]}}
    with _raises("grid.seeds must be an integer from 0 to 2**63 - 1; got 9223372036854775808."):
        load_config(grid)
    result = run("faithfulness", "unused.pt", "--seed", 9223372036854775808)
    assert (
        result.exit_code == 2 and "9223372036854775808 is not in the range 0<=x<=9223372036854775807" in result.output
    )


def test_number_bounds_open_and_closed():
    assert check_number("r", 0, low=0, high=1, high_open=True) == 0  # closed low bound admits it
    with _raises("r must be a finite number >= 0 and < 1; got 1."):
        check_number("r", 1, low=0, high=1, high_open=True)
    with _raises("r must be a finite number > 0; got 0."):
        check_number("r", 0, low=0, low_open=True)
    assert check_number("r", 1.0, low=0, high=1) == 1.0  # closed high bound admits it
    with _raises("r must be a finite number > 0 and < 1; got 1.0."):
        check_number("r", 1.0, low=0, high=1, low_open=True, high_open=True)
    with _raises("r must be a finite number; got inf."):
        check_number("r", float("inf"))
    with _raises("r must be a finite number; got nan."):
        check_number("r", float("nan"))
    with _raises("r must be a finite number; got True."):
        check_number("r", True)
    with _raises("r must be a finite number <= 2; got 2.5."):
        check_number("r", 2.5, high=2)


def test_choice_lists_the_choices_and_the_value():
    assert check_choice("by", "pred", ("pred", "label")) == "pred"
    with _raises("by must be one of {pred, label}; got 'x'."):
        check_choice("by", "x", ("pred", "label"))


def test_optional_admits_none_and_checks_the_rest():
    optional = check_optional(check_positive_int)
    assert optional("limit", None) is None and optional("limit", 3) == 3
    with _raises("limit must be a positive integer; got 0."):
        optional("limit", 0)


def test_fields_apply_each_rule_to_its_field():
    class Options:
        batch_size, seed = 4, -2

    seen = []
    check_fields(Options(), {"batch_size": lambda n, v: seen.append((n, v))})
    assert seen == [("batch_size", 4)]
    with _raises("seed must be an integer from 0 to 2**63 - 1; got -2."):
        check_fields(Options(), {"batch_size": check_positive_int, "seed": check_seed})


@pytest.mark.parametrize(
    "make, message",
    [
        ("EvalOptions(bootstrap=-1)", "EvalOptions.bootstrap must be a non-negative integer; got -1."),
        ("EvalOptions(batch_size=True)", "EvalOptions.batch_size must be a positive integer; got True."),
        ("EvalOptions(tie_rtol=1)", "EvalOptions.tie_rtol must be a finite number >= 0 and < 1; got 1."),
        (
            "EvalOptions(seed=2**63)",
            "EvalOptions.seed must be an integer from 0 to 2**63 - 1; got 9223372036854775808.",
        ),
        ("EvalOptions(limit=0)", "EvalOptions.limit must be a positive integer; got 0."),
        ("TrainOptions(patience=0)", "TrainOptions.patience must be a positive integer; got 0."),
        ("TrainOptions(epochs=2.0)", "TrainOptions.epochs must be a positive integer; got 2.0."),
        ("TrainOptions(seed=-1)", "TrainOptions.seed must be an integer from 0 to 2**63 - 1; got -1."),
        ("SanityOptions(batch_size=0)", "SanityOptions.batch_size must be a positive integer; got 0."),
        ("SanityOptions(bootstrap=-3)", "SanityOptions.bootstrap must be a non-negative integer; got -3."),
        ("PruneOptions(n_random_refit=-1)", "PruneOptions.n_random_refit must be a non-negative integer; got -1."),
        ("PruneOptions(timing_batch=0)", "PruneOptions.timing_batch must be a positive integer; got 0."),
        ("DiagnosisOptions(level=1.0)", "level must be a finite number > 0 and < 1; got 1.0."),
        ("DiagnosisOptions(n_resamples=False)", "n_resamples must be a non-negative integer; got False."),
    ],
)
def test_option_dataclasses_check_through_the_template(make, message):
    from laya_eval.engine.plan import EvalOptions
    from laya_eval.profiling.diagnosis import DiagnosisOptions
    from laya_eval.pruning.options import PruneOptions
    from laya_eval.sanity_checks.options import SanityOptions
    from laya_eval.training.trainer import TrainOptions

    names = {
        "EvalOptions": EvalOptions,
        "TrainOptions": TrainOptions,
        "SanityOptions": SanityOptions,
        "PruneOptions": PruneOptions,
        "DiagnosisOptions": DiagnosisOptions,
    }
    with _raises(message):
        eval(make, names)
