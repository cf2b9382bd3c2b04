"""covey.train"""
