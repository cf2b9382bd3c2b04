"""Training-Free GRPO: the experience library changes, the weights do not, a resume restores the library;
the plan rules and the group filter by hand (youtu-agent bef6ba5, `experience_updater.py`)."""

import json
from pathlib import Path

import pytest
import torch

from covey.models.tiny import build_tiny_tokenizer
from covey.rewards.judge.backends import JudgeReply
from covey.strategies import STRATEGIES
from covey.strategies.training_free import apply_plan, inject, partial_groups
from covey.train.config import load_config
from tests._configs import tiny_config
from tests.strategies.test_episodes import ScriptedEngine, context
from tests._cli import train_example

EXAMPLE = Path(__file__).parents[2] / "examples" / "training_free_grpo.yaml"


class ScriptedLLM:
    """A judge backend that answers each stage from its prompt's wording, and records the stages asked."""

    kind, fingerprint = "scripted", "scripted"

    def __init__(self, plan=None):
        self.asked: list[str] = []
        self.plan = plan if plan is not None else [{"operation": "ADD", "id": None, "content": "Check: re-add the digits."}]

    def complete(self, requests):
        out = []
        for r in requests:
            text = r.messages[-1][1]
            if text.count("Summarise the attempt"):
                stage, reply = "summary", "The agent added the digits."
            elif "Put them inside <Experiences>" in text:
                stage, reply = "advantage", "<Experiences>\n1. Check: re-add the digits.\n</Experiences>"
            elif "New experiences:" in text:
                stage, reply = "group_update", '```json\n[{"operation": "ADD", "id": null, "content": "Check: re-add."}]\n```'
            else:
                stage, reply = "batch_update", "```json\n" + json.dumps(self.plan) + "\n```"
            self.asked.append(stage)
            out.append(JudgeReply(text=reply))
        return out


class GroupEngine(ScriptedEngine):
    """`ScriptedEngine` that also samples n > 1 per prompt (each copy its own scripted turn)."""

    def generate(self, prompts, n, sampling):
        gen = super().generate([p for p in prompts for _ in range(n)], 1, sampling)
        gen.prompt_index = torch.arange(len(prompts)).repeat_interleave(n)
        return gen


# ------------------------------------------------------------------------------------------ rules
def test_apply_plan_follows_the_codes_rules_line_by_line():
    lib = {"G0": "A: a.", "G1": "B: b.", "G2": "C: c."}
    plan = [
        {"operation": "UPDATE", "id": "G0", "content": "A: a2."},  # an id in the library: replaced in place
        {"operation": "UPDATE", "id": "G9", "content": "D: d."},  # an unknown id: added
        {"operation": "DELETE", "id": "G1", "content": "gone"},  # removed
        {"operation": "DELETE", "id": "G2", "content": ""},  # no content: skipped, even a DELETE (the code's order)
        {"operation": "ADD", "id": None, "content": "E: e."},  # added after D
        {"operation": "NONE", "id": None, "content": "F: f."},  # nothing
        "not an object",  # skipped
        {"id": None, "content": "G: g."},  # no operation: ADD (the code's default)
    ]
    new, counts = apply_plan(lib, plan)
    # new ids "3", "4", "5" (from len(library)) keep insertion order, then everything is re-keyed G0..
    assert new == {"G0": "A: a2.", "G1": "C: c.", "G2": "D: d.", "G3": "E: e.", "G4": "G: g."}
    assert counts == {"added": 3, "updated": 1, "deleted": 1}
    assert apply_plan({}, []) == ({}, {"added": 0, "updated": 0, "deleted": 0})


def test_only_partly_right_groups_are_learned_from():
    rewards = [1, 0, 1, 1, 0, 0, 0.5, 0.5]
    groups = [0, 0, 1, 1, 2, 2, 3, 3]
    assert partial_groups(rewards, groups) == [0, 3]  # means 0.5, 1, 0, 0.5
    assert partial_groups(rewards, groups, given_ground_truth=False) == [0, 1, 2, 3]


def test_the_library_goes_into_text_and_chat_prompts():
    lib = {"G0": "A: a.", "G1": "B: b."}
    text = inject("What is 2+3?", lib)
    assert text.startswith("Please solve the problem:\nWhat is 2+3?\n\n") and text.endswith("[G0]. A: a.\n[G1]. B: b.")
    assert inject("x", {}).endswith(":\nNone")
    chat = inject([{"role": "system", "content": "s"}, {"role": "user", "content": "q"}], lib)
    assert chat[0] == {"role": "system", "content": "s"} and chat[1]["content"] == inject("q", lib)


# ------------------------------------------------------------------------------------------ a scripted step
def _strategy(llm, **kw):
    return STRATEGIES.build("training_free_grpo", {"backend": llm, "num_experiences": 1, **kw})


def test_a_step_runs_the_four_stages_on_partly_right_groups_only():
    tok = build_tiny_tokenizer()
    items = [{"id": 0, "prompt": "2+3=", "answer": "5"}, {"id": 1, "prompt": "1+1=", "answer": "2"}]
    # item 0's group: "5" and "4" (half right); item 1's: "2" twice (all right, not used)
    answers = {0: ["5", "4"], 1: ["2", "2"]}
    replies = iter(answers[0] + answers[1])
    engine = GroupEngine(lambda p, k: (tok.encode(next(replies)), "stop"))
    llm = ScriptedLLM()
    strat = STRATEGIES.build("training_free_grpo", {"backend": llm, "inner": "group"})
    strat.library = {"G0": "Old: keep."}

    def score(batch):
        texts = [tok.decode(batch.completion_ids[i, : int(batch.lengths[i])].tolist()) for i in range(len(batch))]
        batch.rewards = torch.tensor([[float(t.strip() == it["answer"])] for t, it in zip(texts, batch.items)])
        batch.reward_names = ("accuracy",)
        return {}

    ctx = context(items, engine, tok, group=2)
    ctx.score = score
    batch, m = strat.rollout(items, ctx)
    # what the engine saw carries the library; the rows' items keep the original prompt for the updater
    assert "[G0]. Old: keep." in tok.decode(engine.calls[0]["prompts"][0])
    assert batch.items[0]["original_prompt"] == "2+3="
    # 2 summaries (group 0 only), 1 group advantage, 1 group update, 1 batch update
    assert llm.asked == ["summary", "summary", "advantage", "group_update", "batch_update"]
    assert strat.library == {"G0": "Old: keep.", "G1": "Check: re-add the digits."}
    assert m["tfgrpo/groups_used"] == 1 and m["tfgrpo/added"] == 1 and m["tfgrpo/library_size"] == 2
    assert strat.state_dict()["library"] == strat.library


def test_replies_that_do_not_parse_leave_the_library_as_it_was():
    class Broken(ScriptedLLM):
        def complete(self, requests):
            self.asked += ["?"] * len(requests)
            return [JudgeReply(text="I cannot follow instructions.") for _ in requests]

    tok = build_tiny_tokenizer()
    items = [{"id": 0, "prompt": "2+3=", "answer": "5"}]
    replies = iter(["5", "4"])
    engine = GroupEngine(lambda p, k: (tok.encode(next(replies)), "stop"))
    ctx = context(items, engine, tok, group=2)

    def score(batch):
        batch.rewards, batch.reward_names = torch.tensor([[1.0], [0.0]]), ("accuracy",)
        return {}

    ctx.score = score
    llm = Broken()
    strat = _strategy(llm)
    _, m = strat.rollout(items, ctx)
    assert strat.library == {} and m["tfgrpo/experiences"] == 0 and llm.asked == ["?", "?", "?"]  # 2 summaries, 1 advantage


def test_bad_parameters_are_one_line_errors():
    with pytest.raises(ValueError, match="cannot wrap itself"):
        STRATEGIES.build("training_free_grpo", {"inner": "training_free_grpo"})
    with pytest.raises(ValueError, match="num_experiences must be >= 1"):
        STRATEGIES.build("training_free_grpo", {"num_experiences": 0})
    with pytest.raises(ValueError, match="unknown backend kind"):
        STRATEGIES.build("training_free_grpo", {"backend": {"kind": "oracle"}})
    with pytest.raises(ValueError, match="needs rollout.strategy"):  # an env with an inner strategy that takes none
        load_config(EXAMPLE, ["env={name: maze}"])
    with pytest.raises(ValueError, match="learns without a weight update: drop algo.objective"):
        load_config(EXAMPLE, ["algo.objective={name: hnpg}"])


# ------------------------------------------------------------------------------------------ through the trainer
@pytest.mark.slow  # two short in-process runs with the tiny model (about 20 s)
def test_the_library_changes_the_weights_do_not_and_a_resume_restores_the_library(tmp_path, toy_reward_module):
    from covey.train.trainer import Trainer

    overrides = ["rollout.strategy={name: training_free_grpo, num_experiences: 1}", "task_reward_weight=0.0",
                 f"rewards=[{{name: {toy_reward_module}}}]", "steps=2", "checkpoint.every=2",
                 "rollout.prompts_per_step=2", "sampling.temperature=1.0"]  # fmt: skip
    cfg = tiny_config(tmp_path, *overrides)
    trainer = Trainer(cfg, tmp_path / "run")
    llm = ScriptedLLM()
    trainer.strategy.llm.backend = llm
    before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
    try:
        for _ in range(2):
            m = trainer.step()
            assert m["learn/frozen"] == 1.0
        trainer.save()
        library = dict(trainer.strategy.library)
    finally:
        trainer.close()
    assert library and "batch_update" in llm.asked  # the digit-fraction reward leaves groups partly right
    after = trainer.model.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)
    resumed = Trainer(cfg, tmp_path / "run", resume=True)
    try:
        assert resumed.strategy.library == library and resumed.step_num == 2
    finally:
        resumed.close()


@pytest.mark.slow  # one CLI run: 2 steps of the example with the tiny model
def test_covey_train_runs_the_training_free_grpo_example_for_two_steps(tmp_path):
    steps = train_example("training_free_grpo.yaml", tmp_path / "run", 'model.name=tiny-llama', 'sampling.max_new_tokens=8', 'rollout.strategy.max_new_tokens=16')
    assert all(s["learn/frozen"] == 1.0 and "tfgrpo/library_size" in s for s in steps)