"""Will it fit and how fast: the memory estimate and its fit, FLOPs and cost, the compiled step's profile, the speed model, the published runs it is checked on and the fit check's results."""
