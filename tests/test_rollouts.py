"""`Rollouts`: the declared optional fields (baseline, token_advantages, segment_tokens) are checked,
sliced by `select` and joined by `concat`; whole-batch fields must agree across `concat`."""

from __future__ import annotations

import pytest
import torch

from covey.rollouts import Rollouts, RolloutsError


def _batch(n: int, t: int, *, first_id: int = 0, **fields) -> Rollouts:
    """n rows of t tokens; row i has i % t + 1 real tokens and token ids 100 * (first_id + i) + j."""
    mask = (torch.arange(t)[None, :] < (torch.arange(n)[:, None] % t + 1)).float()
    ids = 100 * (first_id + torch.arange(n))[:, None] + torch.arange(t)[None, :]
    return Rollouts(
        prompt_ids=[torch.tensor([1, first_id + i]) for i in range(n)],
        completion_ids=ids.long(),
        completion_mask=mask,
        behaviour_logprobs=-mask,
        group=torch.arange(first_id, first_id + n) // 2,
        prompt_id=torch.arange(first_id, first_id + n) // 2,
        **fields,
    ).validate()


def test_select_slices_every_per_row_field_and_keeps_batch_fields():
    adv = torch.arange(12, dtype=torch.float32).reshape(4, 3)
    b = _batch(4, 3, baseline=torch.tensor([0.1, 0.2, 0.3, 0.4]), token_advantages=adv, segment_tokens=2,
               rewards=torch.tensor([[1.0], [0.0], [1.0], [0.5]]), reward_names=("acc",), reward_weights=torch.tensor([2.0]),
               tree_path=[(0,), (0, 1), (0, 2), (1,)])  # fmt: skip
    s = b.select(torch.tensor([3, 1]))
    assert s.baseline.tolist() == pytest.approx([0.4, 0.2])
    assert s.token_advantages.tolist() == [[9.0, 10.0, 11.0], [3.0, 4.0, 5.0]]
    assert s.tree_path == [(1,), (0, 1)] and s.completion_ids[:, 0].tolist() == [300, 100]
    assert s.segment_tokens == 2 and s.reward_names == ("acc",) and s.reward_weights.tolist() == [2.0]
    m = b.select(torch.tensor([True, False, True, False]))
    assert m.baseline.tolist() == pytest.approx([0.1, 0.3]) and m.rewards[:, 0].tolist() == [1.0, 1.0]


def test_concat_joins_per_row_fields_padding_token_fields():
    a = _batch(2, 2, baseline=torch.tensor([0.5, 0.25]), token_advantages=torch.ones(2, 2), segment_tokens=4)
    b = _batch(1, 3, first_id=2, baseline=torch.tensor([1.0]), token_advantages=torch.full((1, 3), 2.0), segment_tokens=4)
    c = Rollouts.concat([a, b]).validate()
    assert c.baseline.tolist() == [0.5, 0.25, 1.0]
    assert c.token_advantages.tolist() == [[1.0, 1.0, 0.0], [1.0, 1.0, 0.0], [2.0, 2.0, 2.0]]  # right-padded to T=3
    assert c.segment_tokens == 4 and c.completion_mask.shape == (3, 3)


def test_concat_refuses_disagreeing_batch_fields_and_half_set_fields():
    with pytest.raises(RolloutsError, match="segment_tokens differs between batches"):
        Rollouts.concat([_batch(1, 2, segment_tokens=2), _batch(1, 2, segment_tokens=3)])
    r = dict(rewards=torch.ones(1, 1), reward_names=("a",))
    with pytest.raises(RolloutsError, match="reward_names differs"):
        Rollouts.concat([_batch(1, 2, **r), _batch(1, 2, rewards=torch.ones(1, 1), reward_names=("b",))])
    with pytest.raises(RolloutsError, match="reward_weights differs"):
        Rollouts.concat([_batch(1, 2, **r, reward_weights=torch.tensor([1.0])), _batch(1, 2, **r, reward_weights=torch.tensor([2.0]))])
    with pytest.raises(RolloutsError, match="field 'baseline' is set in some batches and not others"):
        Rollouts.concat([_batch(1, 2, baseline=torch.ones(1)), _batch(1, 2)])


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"baseline": torch.ones(3)}, r"baseline must have shape \(2,\)"),
        ({"baseline": torch.ones(2, dtype=torch.float64)}, "baseline must have dtype torch.float32"),
        ({"token_advantages": torch.ones(2, 2)}, r"token_advantages must have shape \(2, 3\)"),
        ({"segment_tokens": 0}, "segment_tokens must be a positive int, got 0"),
        ({"segment_tokens": 2.5}, "segment_tokens must be a positive int"),
    ],
)
def test_validate_checks_the_optional_fields(fields, message):
    with pytest.raises(RolloutsError, match=message):
        _batch(2, 3, **fields)


def test_no_untyped_or_unused_fields_remain():
    names = {f for f in Rollouts.__dataclass_fields__}
    assert not names & {"extras", "trajectory", "step"}
    assert {"baseline", "token_advantages", "segment_tokens"} <= names


def test_every_field_declares_its_axis_and_the_groups_view_is_dense():
    import dataclasses

    from covey.rollouts import AXES, Groups

    assert all(f.metadata["axis"] in AXES for f in dataclasses.fields(Rollouts))
    batch_fields = {f.name for f in dataclasses.fields(Rollouts) if f.metadata["axis"] == "batch"}
    assert batch_fields == {"reward_names", "reward_weights", "segment_tokens", "controller", "recompute_old_logprobs"}
    g = Groups.of(torch.tensor([7, 3, 7, 9, 3]))
    assert g.ids.tolist() == [3, 7, 9] and g.index.tolist() == [1, 0, 1, 2, 0] and g.size.tolist() == [2.0, 2.0, 1.0]
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 6.0], dtype=torch.float64)
    assert g.mean(x).tolist() == [4.0, 2.0, 4.0] and g.std(x).tolist() == pytest.approx([2 ** 0.5 * 2, 2 ** 0.5, 0.0])
    assert g.amax(x).tolist() == [6.0, 3.0, 4.0] and g.rank().tolist() == [0, 0, 1, 0, 1] and g.first_row().tolist() == [1, 0, 3]
    empty = Rollouts.empty()
    assert len(empty) == 0 and empty.validate() is empty and empty.groups().num == 0
