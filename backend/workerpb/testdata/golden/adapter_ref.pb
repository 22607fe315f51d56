
	tuft/tinyrun-1