"""covey.plan: the memory a run needs on each device, from its config and the model's config.json.

`plan_config(path, overrides)` -> `MemoryPlan` (pools of `Item`s, devices with a verdict each);
`render(plan)` prints it (`covey plan`). The math is in `covey.plan.memory` (what each byte is and
what is left out), the model's shape in `covey.plan.arch`. Nothing here loads weights;
`covey.bench.memory` measures the same quantities on the CPU to check them.
"""

from covey.plan.arch import Architecture
from covey.plan.memory import GiB, Item, Pool, Settings, engine_pool, learner_pool
from covey.plan.planner import DeviceLoad, MemoryPlan, plan_config, plan_settings
from covey.plan.report import render

__all__ = ["Architecture", "DeviceLoad", "GiB", "Item", "MemoryPlan", "Pool", "Settings", "engine_pool", "learner_pool",
           "plan_config", "plan_settings", "render"]
