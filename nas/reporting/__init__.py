"""What a run shows: candidates.csv, pareto.png and report.html, and runs compared.

`report.py` builds the report and the comparison of runs (tables, headlines, figures); `report_page.py` writes
the HTML pages; `arch_picture.py` draws an arch; `device_fronts.py` costs a run's front on several NPU generations.
"""
