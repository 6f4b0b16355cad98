"""Pages a person reads: a run's (run_page) and a fit check's (fit_page), as one self-contained
HTML file each, plots embedded (page, plots). Pure: callers write the text where it belongs."""
