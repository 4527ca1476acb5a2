"""Latency measured on this machine: `lut_validation.py` checks a latency table against archs of a search space
run end to end here, corrects the table for a run, and measures a run's finalised archs.
"""
