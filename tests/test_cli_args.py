"""The CLI's knob flags come from the configs' knobs (config.py): each knob with help has its flag,
and a flag reaches every method that has the knob."""

from __future__ import annotations

from ouroboros_core.__main__ import build_parser
from ouroboros_core.cli_args import flagged_knobs, method_options
from ouroboros_core.config import OuroborosConfig, SpeculativeConfig, knobs


def test_each_knob_with_help_has_a_flag_and_reaches_each_method_that_has_it():
    flagged = flagged_knobs()
    assert set(flagged) == {name for name, setting in knobs(OuroborosConfig).items() if setting.cli}
    assert {"pool_size", "prompt_lookup"}.isdisjoint(flagged)  # no help: no flag
    args = build_parser().parse_args(
        [
            "generate",
            "x",
            "--gamma",
            "3",
            "--guess-set",
            "5",
            "--lookup-above",
            "0.2",
            "--temperature",
            "0.7",
        ]
    )
    assert method_options(args, "ouroboros") == {
        "temperature": 0.7,
        "gamma": 3,
        "guess_set": 5,
        "lookup_above": 0.2,
    }
    assert set(knobs(SpeculativeConfig)) == {"gamma"}  # set by Ouroboros' --gamma
    assert method_options(args, "speculative") == {"temperature": 0.7, "gamma": 3}
    assert method_options(args, "vanilla") == {"temperature": 0.7}


def test_a_flag_parses_as_its_knobs_type_and_says_its_help():
    parser = build_parser()
    args = parser.parse_args(["generate", "x", "--extend-above", "1", "--lookup", "4"])
    assert args.extend_above == 1.0 and isinstance(args.extend_above, float)
    assert args.lookup == 4 and isinstance(args.lookup, int)
    generate = parser._subparsers._group_actions[0].choices["generate"]
    helps = {action.dest: action.help for action in generate._actions}
    assert helps["gamma"] == "minimum draft length per target forward"
    assert helps["lookup"] == "Ouroboros context-lookup branch length L (0: none)"
