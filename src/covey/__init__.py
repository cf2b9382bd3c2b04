from covey.rollouts import Rollouts

__all__ = ["Rollouts"]
__version__ = "0.1.0"
