"""covey.tasks: built-in verifiable tasks (prompt items + verifier), registered by name.

`get_task("arithmetic", digits=2)` builds one; `TASKS` lists them. Each task documents its
answer format in its class docstring and `answer_format` attribute (see docs/tasks.md).
"""

from covey.tasks.arithmetic import Arithmetic
from covey.tasks.causal import CausalSCM
from covey.tasks.countdown import Countdown
from covey.tasks.gsm8k import GSM8K
from covey.tasks.gui_points import GuiPoints
from covey.tasks.math500 import MATH500
from covey.tasks.mixture import Mixture
from covey.tasks.base import Task
from covey.tasks.registry import TASKS, get_task, register_task

__all__ = ["GSM8K", "MATH500", "GuiPoints", "TASKS", "Arithmetic", "CausalSCM", "Countdown", "Mixture", "Task", "get_task", "register_task"]
from covey.tasks import dataset, humaneval, mbpp  # noqa: E402,F401 - registers the code tasks and `dataset`
from covey.tasks import maze, red_team, search_qa, verifiers  # noqa: E402,F401 - the tasks of the maze, red_team, search_qa and verifiers environments
from covey.tasks import gui_actions, shapes_vqa, table_images, video_grounding  # noqa: E402,F401 - the vision tasks (docs/vlm.md)
from covey.tasks import math_beyond, triggered  # noqa: E402,F401 - MATH-Beyond from a local copy; trigger phrases (DecepChain)
from covey.tasks import gui_sim, skill_chains, starling  # noqa: E402,F401 - gui_sim (UI-S1), skill_chains (SAGE), STARLING's games
