"""covey.data"""
