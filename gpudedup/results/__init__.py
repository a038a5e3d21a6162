"""What a run gives back and how it is shown: the DedupResult and the writing of its outputs
(result.py), the notebook's views of a cluster, a pair and the removed rows (inspection.py),
report.html (html_report/) with its SVG figures (svg_figures.py), and the evaluation's figure
drawn with matplotlib (plots.py). Everything here renders what the pipeline computed
(pipeline/outcome.py, pipeline/shown.py) and never computes the job itself."""
