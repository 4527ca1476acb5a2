"""What a run shows: candidates.csv, pareto.png and report.html, and runs compared.

`report.py` makes a run's tables and sentences (candidates.csv rows, headlines against the baselines, per NPU
generation); `report_page.py` lays out the HTML pages; `build.py` draws the figures and writes a run's pages
(pareto.png, report.html) and the comparison of runs; `arch_picture.py` draws an arch; `device_fronts.py` costs a
run's front on several NPU generations.
"""
