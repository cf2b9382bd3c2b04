"""`treepo`: tree advantages on a hand-built tree, the rollout's tree invariants (tree_path, shared
prefixes, leaf counts, fewer decoded tokens), and one training step from config."""

import pytest
import torch

from covey.algos.advantages.tree import branch_grpo, branch_node_values, tree_depth_deviations, treepo
from covey.engine import SamplingParams, TorchEngine
from covey.models import build_tiny
from covey.strategies.treepo import branch_counts, grow_trees
from covey.rollouts import Rollouts, RolloutsError
from covey.train.config import validate_config
from covey.train.trainer import Trainer

PATHS = [(0, 2), (0, 3), (1, 4), (1, 5)]  # a/x, a/y, b/z, b/w
R = [1.0, 0.0, 0.0, 0.0]


def _batch(paths=PATHS, rewards=R, t=4):
    n = len(paths)
    return Rollouts(
        prompt_ids=[torch.tensor([1, 2])] * n, completion_ids=torch.ones(n, t, dtype=torch.long),
        completion_mask=torch.ones(n, t), behaviour_logprobs=torch.zeros(n, t), group=torch.zeros(n, dtype=torch.long),
        prompt_id=torch.zeros(n, dtype=torch.long), rewards=torch.tensor(rewards)[:, None], reward_names=("r",),
        tree_path=list(paths), segment_tokens=2,
    )  # fmt: skip


def test_tree_deviations_on_a_hand_built_tree():
    g = [0, 0, 0, 0]
    paper = tree_depth_deviations(R, g, PATHS, root_group=True)
    assert paper == pytest.approx([0.625, -0.375, -0.125, -0.125])  # mean of (r - 0.25) and (r - subtree mean)
    code = tree_depth_deviations(R, g, PATHS, root_group=False)
    assert code == pytest.approx([0.5, -0.5, 0.0, 0.0])  # coarsest subgroup = first-level subtree
    sized = tree_depth_deviations(R, g, PATHS, root_group=True, weight="group_size")
    assert sized[0] == pytest.approx((0.75 * 4 + 0.5 * 2) / 6)
    # two prompts never share a subgroup even with equal node ids
    two = tree_depth_deviations(R + R[::-1], g + [1] * 4, PATHS + PATHS, root_group=True)
    assert two[:4] == pytest.approx(paper) and two[4:] == pytest.approx([-0.125, -0.125, -0.375, 0.625])


def test_treepo_estimator_whitens_and_needs_paths():
    out = treepo(_batch(), whiten_batch=False)
    assert out.advantages.tolist() == pytest.approx([0.625, -0.375, -0.125, -0.125])
    w = treepo(_batch()).advantages
    assert abs(float(w.mean())) < 1e-6 and w[0] > 0 > w[1]
    b = _batch()
    b.tree_path = None
    with pytest.raises(RolloutsError, match="tree_path"):
        treepo(b)


def test_branch_grpo_depthwise_fusion():
    out = branch_grpo(_batch())
    adv = out.advantages
    s = 0.5**0.5  # depth 1: nodes a=0.5, b=0 -> +-0.7071; depth 2: leaves 1,0,0,0 -> 1.5, -0.5
    assert adv[0].tolist() == pytest.approx([s, s, 1.5, 1.5], abs=1e-5)
    assert adv[2].tolist() == pytest.approx([-s, -s, -0.5, -0.5], abs=1e-5)
    # each edge trained once (the code's transitions): the shared first segments of a/y and b/w are masked
    assert out.sample_mask.tolist() == [[1, 1, 1, 1], [0, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1]]
    assert branch_grpo(_batch(), edges="per_leaf").sample_mask is None


def test_branch_grpo_matches_the_released_code_on_the_spec_tree():
    # spec (Fredreic1849/BranchGRPO@19fbb9f): root -> 2 children -> 2 leaves each, leaf rewards [1, 0, 1, 1]:
    # node rewards [0.75], [0.5, 1.0]; advantages [0], [-0.707107, 0.707107], [0.5, -1.5, 0.5, 0.5]
    b = _batch(rewards=[1.0, 0.0, 1.0, 1.0])
    adv = branch_grpo(b).advantages
    assert adv[:, :2].flatten().tolist() == pytest.approx([-0.707107] * 4 + [0.707107] * 4, abs=1e-6)
    assert adv[:, 2].tolist() == pytest.approx([0.5, -1.5, 0.5, 0.5], abs=1e-6)
    values = branch_node_values(PATHS, [0] * 4, [1.0, 0.0, 1.0, 1.0])
    assert values[(0,)] == 0.75 and values[(0, 0)] == 0.5 and values[(0, 1)] == 1.0
    # tree_prob_weighted: softmax over the child edges' log-probs; the spec's vector: children [0.5, 1.0]
    # with edge log-probs [-1, -2] -> weights [0.731059, 0.268941] -> 0.634471
    r = [0.0, 1.0, 1.0, 1.0]  # a -> 0.5 only if its children's edges weigh equally (both -1)
    edge = {(0, 0): -1.0, (0, 1): -2.0, (0, 0, 2): -1.0, (0, 0, 3): -1.0, (0, 1, 4): -0.2, (0, 1, 5): -0.6}
    pw = branch_node_values(PATHS, [0] * 4, r, edge)
    assert pw[(0, 0)] == pytest.approx(0.5) and pw[(0, 1)] == pytest.approx(1.0)
    assert pw[(0,)] == pytest.approx(0.634471, abs=1e-6)


def test_branch_grpo_prob_weighted_reads_edge_logprobs_from_the_batch():
    b = _batch(rewards=[1.0, 0.0, 1.0, 1.0])
    # segments of 2 tokens: edges a = -1 (row 0 seg 0), x = -0.5, y = -2, b = -2, z = -0.2, w = -0.6
    b.behaviour_logprobs = torch.tensor([[-0.5, -0.5, -0.25, -0.25], [-0.5, -0.5, -1.0, -1.0],
                                         [-1.0, -1.0, -0.1, -0.1], [-1.0, -1.0, -0.3, -0.3]])  # fmt: skip
    out = branch_grpo(b, fusion="prob_weighted")
    # a = softmax([-0.5, -2]) . [1, 0] = 0.817574, b = 1: two nodes at depth 1 -> -+0.707107 whatever their gap
    assert out.advantages[0, 0] == pytest.approx(-0.707107, abs=1e-6) and out.advantages[2, 0] == pytest.approx(0.707107, abs=1e-6)
    flip = _batch(rewards=[0.0, 1.0, 0.0, 0.0])
    flip.behaviour_logprobs = b.behaviour_logprobs
    # uniform: a = 0.5 > b = 0; prob_weighted: a = softmax([-0.5, -2]) . [0, 1] = 0.182426 > 0 still
    assert branch_grpo(flip, fusion="prob_weighted").advantages[0, 0] > 0
    # with three first-level nodes the weights show: c (one leaf, reward 0.5) sits between a and b
    paths = PATHS + [(6, 7)]
    three = _batch(paths=paths, rewards=[1.0, 0.0, 1.0, 1.0, 0.5])
    three.behaviour_logprobs = torch.cat([b.behaviour_logprobs, torch.full((1, 4), -1.0)])
    v = [0.817574, 1.0, 0.5]  # a, b, c
    m, sd = sum(v) / 3, torch.tensor(v, dtype=torch.float64).std().item()
    got = branch_grpo(three, fusion="prob_weighted").advantages[:, 0].tolist()
    assert got == pytest.approx([(v[0] - m) / sd] * 2 + [(v[1] - m) / sd] * 2 + [(v[2] - m) / sd], abs=1e-5)
    uni = branch_grpo(three).advantages[:, 0].tolist()  # uniform: a = 0.5
    v = [0.5, 1.0, 0.5]
    m, sd = sum(v) / 3, torch.tensor(v, dtype=torch.float64).std().item()
    assert uni == pytest.approx([(v[0] - m) / sd] * 2 + [(v[1] - m) / sd] * 2 + [(v[2] - m) / sd], abs=1e-5)


def test_branch_counts_follow_the_fixed_avg_rule():
    assert branch_counts(2, 8, 0, 2) == [2, 2]  # min(8, 0*2 + 2*2) = 4
    assert branch_counts(4, 8, 0, 2) == [2, 2, 2, 2]
    assert branch_counts(8, 8, 0, 2) == [1] * 8
    assert branch_counts(3, 5, 1, 2) == [1, 1, 3]  # total 5, the last path takes the remainder
    assert branch_counts(3, 2, 0, 2) == [1, 1, 1]  # every active path continues


@pytest.fixture(scope="module")
def engine():
    model, tok = build_tiny("tiny-llama", seed=5)
    return TorchEngine(model, tok, dtype="fp32"), tok


@pytest.mark.parametrize("stop", [(), (7, 9, 11, 13)])
def test_trees_have_width_leaves_and_share_prefixes(engine, stop):
    eng, tok = engine
    sp = SamplingParams(seed=4, max_new_tokens=16, ignore_eos=True, stop_token_ids=stop)
    prompts = [tok("1+2=")["input_ids"], tok("30-4=")["input_ids"]]
    leaves, m = grow_trees(eng, sp, prompts, [8, 6], L=4, W=2, first=(2, 2), max_depth=None, fallback=True)
    by_root = [[r for r in leaves if r.payload[0] == i] for i in range(2)]
    assert [len(x) for x in by_root] == [8, 6]
    for rows in by_root:
        assert len({r.payload[1] for r in rows}) == len(rows)  # unique paths
        for a in rows:
            for b in rows:
                d = next((k for k in range(min(len(a.payload[1]), len(b.payload[1]))) if a.payload[1][k] != b.payload[1][k]), None)
                shared = d if d is not None else min(len(a.payload[1]), len(b.payload[1]))
                assert a.tokens[: shared * 4] == b.tokens[: shared * 4]  # same path prefix = same tokens
    if not stop:  # no early stops: 2 -> 4 -> 8 paths over 4 segments of 4 tokens
        assert m["tree/decoded_tokens"] == 4 * (2 + 4 + 8 + 8) + 4 * (2 + 4 + 6 + 6)
        assert m["tree/decoded_per_leaf"] < 16 * 0.75


def test_treepo_trains_one_step_from_config(tmp_path):
    cfg = validate_config({
        "model": {"name": "tiny-llama"}, "task": {"name": "arithmetic", "params": {"digits": 1, "n_train": 16, "n_test": 4}},
        "rollout": {"prompts_per_step": 2, "group_size": 4, "strategy": {"name": "treepo", "segment_tokens": 3}},
        "sampling": {"max_new_tokens": 8}, "algo": {"advantage": {"name": "treepo"}, "kl": None},
        "reward_workers": 0, "log": {"progress": False, "tensorboard": False, "dir": str(tmp_path)}, "steps": 1,
    })  # fmt: skip
    trainer = Trainer(cfg, tmp_path / "run")
    m = trainer.step()
    assert m["tree/leaves"] == 8 and m["time/step"] > 0
    trainer.close()


def test_branch_grpo_prob_weighted_uses_each_edge_s_own_segment():
    # 3 segments of 1 token; edge log-prob = that segment's token only
    paths = [(0, 2, 6), (0, 2, 7), (0, 3, 8), (1, 4, 9), (5, 10, 11)]
    b = _batch(paths=paths, rewards=[1.0, 0.0, 0.0, 1.0, 0.5], t=3)
    b.segment_tokens = 1
    b.behaviour_logprobs = torch.tensor([[-0.1, -0.5, -3.0], [-0.1, -0.5, -0.1], [-0.1, -1.5, -0.1],
                                         [-1.0, -1.0, -1.0], [-1.0, -1.0, -1.0]])  # fmt: skip
    # node 2 = softmax([-3, -0.1]) . [1, 0] = 0.052154; node 3 = 0; node 0 = softmax([-0.5, -1.5]) . [0.052154, 0]
    n2 = 1 / (1 + torch.tensor(2.9).exp().item())
    v = [n2 / (1 + torch.tensor(-1.0).exp().item()), 1.0, 0.5]  # nodes 0, 1, 5
    m, sd = sum(v) / 3, torch.tensor(v, dtype=torch.float64).std().item()
    got = branch_grpo(b, fusion="prob_weighted").advantages[:, 0].tolist()
    want = [(v[0] - m) / sd] * 3 + [(v[1] - m) / sd, (v[2] - m) / sd]
    assert v[0] == pytest.approx(0.038128, abs=1e-6) and got == pytest.approx(want, abs=1e-5)


def test_branch_grpo_zero_below_the_code_s_std_floor():
    # two depth-1 nodes whose values differ by 1e-7: std < 1e-6 -> A = 0 there (the code), leaves too
    b = _batch(rewards=[0.5, 0.5, 0.5 + 1e-7, 0.5 + 1e-7])
    assert branch_grpo(b).advantages.abs().max() == 0.0


def test_branch_grpo_clips_advantages_at_the_code_s_five():
    # 36 first-level nodes, one reward 1: mean 1/36, unbiased std 1/6 -> A = (35/36) * 6 = 5.8333 > 5
    paths = [(i,) for i in range(36)]
    b = _batch(paths=paths, rewards=[1.0] + [0.0] * 35)
    b.tree_path = paths
    adv = branch_grpo(b).advantages[:, 0]
    assert adv[0].item() == pytest.approx(5.0) and adv[1].item() == pytest.approx(-1 / 6, abs=1e-6)
    assert branch_grpo(b, adv_clip=None).advantages[0, 0].item() == pytest.approx(35 / 6, abs=1e-6)


def test_branch_node_values_pass_a_single_child_s_value_through():
    # root -> 0 (its only child) -> leaves 1, 2 (rewards 1, 0; edge log-probs -1, -2):
    # node 0 = softmax([-1, -2]) . [1, 0] = 0.731059; the root passes it through (its leaf mean is 0.5)
    edge = {(0, 0): -0.3, (0, 0, 1): -1.0, (0, 0, 2): -2.0}
    pw = branch_node_values([(0, 1), (0, 2)], [0, 0], [1.0, 0.0], edge)
    assert pw[(0, 0)] == pytest.approx(0.731059, abs=1e-6) and pw[(0,)] == pytest.approx(0.731059, abs=1e-6)
