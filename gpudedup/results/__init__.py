"""What a run gives back and how it is shown: the DedupResult and the writing of its outputs
(result.py), the notebook's views of a cluster, a pair and the removed rows (inspection.py),
report.html (html_report/), and the figures (svg_figures.py: report.html's and the
evaluation's, SVG written directly). Everything here renders what the pipeline computed
(pipeline/outcome.py, pipeline/shown.py) and never computes the job itself."""
