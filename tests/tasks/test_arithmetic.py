import pytest

from covey.tasks import Arithmetic, Task, get_task
from covey.tasks._expr import evaluate


def test_is_a_registered_task():
    task = get_task("arithmetic", n_train=5, n_test=5)
    assert isinstance(task, Task) and isinstance(task, Arithmetic)
    assert "last number" in task.answer_format


def test_same_seed_same_items_other_seed_other_items():
    a = Arithmetic(digits=2, n_train=50, n_test=20, seed=1).examples("train")
    b = Arithmetic(digits=2, n_train=50, n_test=20, seed=1).examples("train")
    c = Arithmetic(digits=2, n_train=50, n_test=20, seed=2).examples("train")
    assert a == b
    assert [x["expression"] for x in a] != [x["expression"] for x in c]


def test_train_and_test_are_disjoint_and_deduplicated():
    task = Arithmetic(digits=1, operands=2, ops="+-", n_train=60, n_test=40)
    train = [x["expression"] for x in task.examples("train")]
    test = [x["expression"] for x in task.examples("test")]
    assert len(set(train)) == 60 and len(set(test)) == 40
    assert not set(train) & set(test)


def test_test_split_does_not_depend_on_train_size():
    small = Arithmetic(digits=2, n_train=10, n_test=30).examples("test")
    big = Arithmetic(digits=2, n_train=500, n_test=30).examples("test")
    assert small == big


def test_tiny_space_is_enumerated_and_exhausted_exactly():
    # 1-digit a + b with a, b in 1..9: 9 * 9 = 81 problems in all
    task = Arithmetic(digits=1, operands=2, ops="+", n_train=61, n_test=20)
    assert len(task.examples("train")) == 61
    with pytest.raises(ValueError, match="only 81 distinct problems .* wants 82"):
        Arithmetic(digits=1, operands=2, ops="+", n_train=0, n_test=82).examples("test")


def test_answers_are_exact_values_with_precedence():
    task = Arithmetic(digits=2, operands=3, ops="+-*", n_train=0, n_test=50, nonnegative=False)
    for item in task.examples("test"):
        nums = item["expression"].split()
        assert all(10 <= int(n) <= 99 for n in nums[::2])
        assert int(item["answer"]) == evaluate(item["expression"])[0]
    assert any(int(x["answer"]) < 0 for x in task.examples("test"))  # 50 draws: some negative


def test_nonnegative_redraws_negative_problems():
    task = Arithmetic(digits=2, operands=3, ops="-", n_train=0, n_test=30)
    assert all(int(x["answer"]) >= 0 for x in task.examples("test"))


def test_prompt_is_text_or_one_user_message():
    text = Arithmetic(n_train=1, n_test=1, chat=False).examples("test")[0]
    chat = Arithmetic(n_train=1, n_test=1, chat=True).examples("test")[0]
    assert text["prompt"] == f"What is {text['expression']}? Answer with the number only."
    assert chat["prompt"] == [{"role": "user", "content": text["prompt"]}]


def test_reward_reads_last_number():
    task = Arithmetic(n_train=0, n_test=1)
    completions = ["23 + 45 = 68", "68", "The answer is 68.", "I think 68 but 23 + 45", "", "sixty-eight",
                   [{"role": "assistant", "content": "= 68"}], "68.0", "-68"]
    assert task.reward(None, completions, answer=["68"] * len(completions)) == [1, 1, 1, 0, 0, 0, 1, 1, 0]


def test_reward_with_negative_answer():
    task = Arithmetic(n_train=0, n_test=1)
    assert task.reward(None, ["3 - 9 = -6", "3 - 9 = 6"], answer=["-6", "-6"]) == [1.0, 0.0]


@pytest.mark.parametrize(
    "params, message",
    [
        ({"digits": 0}, "digits must be an int in \\[1, 9\\], got 0"),
        ({"operands": 1}, "operands must be an int in \\[2, 8\\]"),
        ({"ops": "+/"}, "ops must be a non-empty string"),
        ({"ops": "++"}, "ops must be a non-empty string"),
        ({"template": "What?"}, "template must contain"),
        ({"n_test": -1}, "n_test must be an int"),
    ],
)
def test_bad_params_fail_with_the_allowed_values(params, message):
    with pytest.raises(ValueError, match=message):
        Arithmetic(**params)


def test_unknown_split_and_param():
    with pytest.raises(ValueError, match="no split 'dev'; allowed: train, test"):
        Arithmetic(n_train=1, n_test=1).examples("dev")
    with pytest.raises(ValueError, match=r"task .arithmetic. has no parameter\(s\) \[.digitz.\]"):
        get_task("arithmetic", digitz=2)


def test_default_preset_builds_and_docstring_examples_hold():
    import doctest

    import covey.tasks.arithmetic as mod

    task = Arithmetic()
    assert len(task.examples("train")) == task.n_train and len(task.examples("test")) == task.n_test
    result = doctest.testmod(mod)
    assert result.attempted >= 3 and result.failed == 0
