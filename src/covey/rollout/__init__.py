"""covey.rollout"""
