"""covey.rewards"""
