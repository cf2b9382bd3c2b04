"""PORTool (`portool_provisional`, reconstructed): step rewards from the share of correct descendants plus
the tool term, fork-relative advantages among siblings, blended with GRPO over trajectories; by hand."""

import dataclasses
import math

import pytest

from covey.algos.advantages.portool import step_tool_ok
from tests.algos.test_step_credit import close, episodes, per_step, run

# five trajectories of one group sharing first steps: node ids per turn, outcome on the last turn
PATHS = [(1, 2, 4), (1, 2, 5), (1, 3), (6, 7), (8,)]
OUTCOME = [1.0, 0.0, 1.0, 0.0, 1.0]
TOOL_ERRORS = {(2, 1): 1}  # trajectory 2's second step (node 3) had a tool error


def tree(paths=PATHS, outcome=OUTCOME, errors=TOOL_ERRORS, with_items=True):
    eps = [{"group": 0, "rewards": [0.0] * (len(p) - 1) + [o], "anchors": [None] * len(p)} for p, o in zip(paths, outcome)]
    b = episodes(eps)
    items = [{"id": 0, "transcript": [{"role": "assistant", "tool_errors": errors.get((j, t), 0)} for t in range(len(p))]}
             for j, p in enumerate(paths)]  # fmt: skip
    return dataclasses.replace(b, tree_path=[tuple(p) for p in paths], items=items if with_items else None).validate()


def test_step_advantages_by_hand():
    adv = per_step(tree(), run("portool_provisional", tree()).advantages)
    # outcomes through each node: (1) 2/3, (1,2) 1/2, (1,2,4) 1, (1,2,5) 0, (1,3) 1, (6) 0, (6,7) 0, (8) 1;
    # R = that + 0.1 x (no tool error): only node (1,3) misses the 0.1
    # first steps (1), (6), (8): R = [0.76667, 0.1, 1.1], mean 0.65556, unbiased std 0.50918
    root = [0.2182179, -1.0910895, 0.8728716]
    two = 1 / math.sqrt(2)  # a fork of two siblings: +-1/sqrt(2) (minus eps)
    # trajectories: outcomes [1, 0, 1, 0, 1], mean 0.6, unbiased std sqrt(0.3)
    win, lose = 0.4 / math.sqrt(0.3), -0.6 / math.sqrt(0.3)
    close(adv[0], [win + root[0], win - two, win + two], tol=1e-5)  # (1,2): 0.6 < (1,3): 1.0; (1,2,4) 1.1 > 0.1
    close(adv[1], [lose + root[0], lose - two, lose - two], tol=1e-5)
    close(adv[2], [win + root[0], win + two], tol=1e-5)
    close(adv[3], [lose + root[1], lose + 0.0], tol=1e-5)  # (6,7) is an only child: no fork advantage
    close(adv[4], [win + root[2]], tol=1e-5)


def test_the_tool_term_and_the_weights_change_what_they_should():
    # without the tool term, (1,3) keeps 1.0 > (1,2) 0.5: the same signs; the root fork changes
    adv = per_step(tree(), run("portool_provisional", tree(), tool_weight=0.0, fork_weight=0.0).advantages)
    win, lose = 0.4 / math.sqrt(0.3), -0.6 / math.sqrt(0.3)
    close([a for row in adv for a in row], [win] * 3 + [lose] * 3 + [win] * 2 + [lose] * 2 + [win], tol=1e-5)
    # fork_norm mean: the sibling deviations themselves (first steps: R - 0.65556)
    adv = per_step(tree(), run("portool_provisional", tree(), fork_norm="mean").advantages)
    close([adv[4][0] - win], [1.1 - (0.7666667 + 0.1 + 1.1) / 3], tol=1e-5)
    # a tool error on a shared first step lowers that node for every trajectory through it
    errs = {(0, 0): 1, (1, 0): 1, (2, 0): 1}
    base = per_step(tree(), run("portool_provisional", tree()).advantages)
    assert per_step(tree(errors=errs), run("portool_provisional", tree(errors=errs)).advantages)[0][0] < base[0][0]
    assert step_tool_ok(None, 2) == [1.0, 1.0] and step_tool_ok({"transcript": [{"role": "assistant", "tool_errors": 2}]}, 2) == [0.0, 1.0]


def test_a_batch_without_a_tree_or_with_paths_of_the_wrong_length_is_refused():
    with pytest.raises(Exception, match="tree_path"):
        run("portool_provisional", dataclasses.replace(tree(), tree_path=None))
    bad = dataclasses.replace(tree(), tree_path=[(1, 2)] + [tuple(p) for p in PATHS[1:]])
    with pytest.raises(Exception, match="has 3 turns but a tree path of 2 nodes"):
        run("portool_provisional", bad)
