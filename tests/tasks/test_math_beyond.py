"""`math_beyond`: the loader of a local MATH-Beyond copy (the 3-problem fixture in
examples/math_beyond, both layouts of the unsolved subsets, the column errors) and the eval ->
coverage path from the CLI."""

import json
from pathlib import Path

import pytest

from covey.tasks import get_task
from covey.tasks.math_beyond import unsolved_models

FIXTURE = Path(__file__).parents[2] / "examples" / "math_beyond"


def test_fixture_loads_all_rows_with_their_columns():
    task = get_task("math_beyond", path=str(FIXTURE), chat=False)
    items = task.examples("test")
    assert [it["answer"] for it in items] == ["1", "24", "84"] and [it["id"] for it in items] == [0, 1, 2]
    assert items[0]["row_id"] == "mb-0" and items[2]["topic"] == "geometry" and "problem" not in items[0]
    assert items[1]["prompt"].startswith("How many positive divisors") and items[1]["prompt"].endswith("\\boxed{}.")
    assert task.reward(None, [r"so \boxed{24}", "the answer is 24", r"\boxed{25}"], answer=["24"] * 3) == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError, match="no split 'train'"):
        task.examples("train")


def test_unsolved_subsets_one_model_and_the_intersection():
    one = get_task("math_beyond", path=str(FIXTURE / "test.csv"), unsolved_by="tiny-llama")
    assert [it["answer"] for it in one.examples("test")] == ["1", "24"]  # rows 0 and 1 list tiny-llama
    both = get_task("math_beyond", path=str(FIXTURE), unsolved_by=["tiny-llama", "smollm2-135m"])
    assert [it["id"] for it in both.examples("test")] == [0]  # only row 0 lists both (MATH-B-I's rule)
    with pytest.raises(ValueError, match="no row of .* is unsolved by"):
        get_task("math_beyond", path=str(FIXTURE), unsolved_by="gpt-2").examples("test")


def test_per_model_flag_columns_and_float_answers(tmp_path):
    rows = [{"question": "1+1?", "gold": 2.0, "m1": True, "m2": "0"},
            {"question": "2+2?", "gold": 4, "m1": "yes", "m2": 1},
            {"question": "3+3?", "gold": "6", "m1": 0, "m2": "true"}]  # fmt: skip
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    task = get_task("math_beyond", path=str(tmp_path), problem_key="question", answer_key="gold", unsolved_by="m1")
    assert [it["answer"] for it in task.examples("test")] == ["2", "4"]  # 2.0 -> "2"
    assert unsolved_models(rows[1], "unsolved_by", ["m1", "m2"], "r") == {"m1", "m2"}
    assert unsolved_models({"unsolved_by": "a, b;c"}, "unsolved_by", ["b", "c", "d"], "r") == {"b", "c"}
    assert unsolved_models({"unsolved_by": ["a"]}, "unsolved_by", ["a"], "r") == {"a"}
    with pytest.raises(ValueError, match="must be a flag"):
        unsolved_models({"m1": "maybe"}, "unsolved_by", ["m1"], "r")
    with pytest.raises(ValueError, match="neither an 'unsolved_by' column nor a column named 'm3'"):
        get_task("math_beyond", path=str(tmp_path), problem_key="question", answer_key="gold", unsolved_by="m3").examples("test")


def test_refusals(tmp_path):
    with pytest.raises(ValueError, match="needs path="):
        get_task("math_beyond")
    with pytest.raises(FileNotFoundError, match="holds none of"):
        get_task("math_beyond", path=str(tmp_path)).examples("test")
    with pytest.raises(ValueError, match="no 'question' column"):
        get_task("math_beyond", path=str(FIXTURE), problem_key="question").examples("test")
    with pytest.raises(ValueError, match="unsolved_by must be"):
        get_task("math_beyond", path=str(FIXTURE), unsolved_by=[])


@pytest.mark.integration
def test_eval_then_coverage_from_the_cli(tmp_path):
    from typer.testing import CliRunner

    from covey.cli import app

    runner = CliRunner()
    outs = []
    for name, seed in (("base", 0), ("post", 1)):
        out = tmp_path / f"{name}.jsonl"
        res = runner.invoke(app, ["eval", "--model", "tiny-llama", "--task", "math_beyond", "--task-param", f"path={FIXTURE}",
                                  "--task-param", "unsolved_by=tiny-llama", "--n", "2", "--temperature", "1",
                                  "--max-new-tokens", "4", "--seed", str(seed), "--samples-out", str(out), "--dtype", "fp32"])  # fmt: skip
        assert res.exit_code == 0, res.output
        outs.append(out)
    assert {json.loads(l)["problem_id"] for l in outs[0].read_text().splitlines() if '"problem_id"' in l} == {0, 1}
    res = runner.invoke(app, ["compare", "coverage", str(outs[0]), str(outs[1]), "--out", str(tmp_path / "c"), "--json"])
    assert res.exit_code == 0, res.output
    cov = json.loads((tmp_path / "c" / "coverage.json").read_text())
    assert cov["problems"] == 2 and cov["k"] == 2 and cov["base_unsolved"] == 2  # the tiny model solves neither
