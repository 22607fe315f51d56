

	tuft/tinyrun-1/ckpt/run-1/weights/step-4"

dimuon