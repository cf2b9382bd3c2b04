"""covey.engine"""
