"""Held-out data that the final-answer check cannot score is refused, never silently dropped."""

import pytest

from covey.tasks.dataset import DatasetTask

ANSWERED = [{"prompt": "1+1=", "answer": "2"}, {"prompt": "2+2=", "answer": "4"}]
PLAIN = [{"prompt": "1+1="}, {"prompt": "2+2="}]


@pytest.mark.parametrize("train, held_out, has, lacks", [(ANSWERED, PLAIN, "train", "eval"), (PLAIN, ANSWERED, "eval", "train")])
def test_answer_column_in_one_split_only_is_an_error(train, held_out, has, lacks):
    with pytest.raises(ValueError, match=f"the {has} rows have an 'answer' column and the {lacks} rows do not"):
        DatasetTask(rows=train, eval_rows=held_out)
    task = DatasetTask(rows=train, eval_rows=held_out, verifier="none")  # rewards only: fine
    assert task.reward is None and len(task.examples("test")) == 2


def test_answers_in_both_splits_or_neither_are_fine():
    assert DatasetTask(rows=ANSWERED, eval_rows=ANSWERED).reward is not None
    assert DatasetTask(rows=PLAIN, eval_rows=PLAIN).reward is None


def test_grpo_trainer_refuses_an_eval_dataset_it_cannot_score(tmp_path):
    from covey import GRPOTrainer

    def brevity(completions, **kw):
        return [-len(c) / 10 for c in completions]

    with pytest.raises(ValueError, match="eval_dataset is scored with the final-answer check, which needs an 'answer' column"):
        GRPOTrainer("tiny-llama", brevity, train_dataset=PLAIN, eval_dataset=PLAIN, run_dir=tmp_path / "r",
                    config={"reward_workers": 0})  # fmt: skip
    assert not (tmp_path / "r").exists()
    with pytest.raises(ValueError, match="the train rows have an 'answer' column and the eval rows do not"):
        GRPOTrainer("tiny-llama", brevity, train_dataset=ANSWERED, eval_dataset=PLAIN, run_dir=tmp_path / "r")
