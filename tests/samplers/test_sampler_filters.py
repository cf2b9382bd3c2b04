import torch

from covey.samplers import UniformSampler, informative_groups


def test_sampler_visits_every_item_once_per_epoch():
    items = [{"id": i} for i in range(5)]
    s = UniformSampler(items, seed=3)
    first = [d.item["id"] for d in s.next(5, 4)]
    second = [d.item["id"] for d in s.next(5, 4)]
    assert sorted(first) == sorted(second) == list(range(5))
    assert first != second  # a fresh permutation each epoch (seeded)


def test_sampler_resumes_exactly_from_its_state():
    items = [{"id": i} for i in range(7)]
    a = UniformSampler(items, seed=1)
    a.next(4, 4)
    state = a.state_dict()
    expected = [d.item["id"] for d in a.next(9, 4)]
    b = UniformSampler(items, seed=1)
    b.load_state_dict(state)
    assert [d.item["id"] for d in b.next(9, 4)] == expected


def test_sampler_rejects_empty_source():
    try:
        UniformSampler([], seed=0)
    except ValueError as e:
        assert "no items" in str(e)
    else:
        raise AssertionError("empty source accepted")


def test_informative_groups_keeps_only_mixed_groups():
    rewards = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.5])
    group = torch.tensor([7, 7, 2, 2, 9])  # group 7 constant, group 2 mixed, group 9 a singleton (no signal)
    assert informative_groups(rewards, group).tolist() == [False, False, True, True, False]
