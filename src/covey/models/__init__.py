"""covey.models"""
