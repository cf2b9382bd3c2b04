"""covey.eval"""
