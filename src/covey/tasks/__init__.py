"""covey.tasks"""
