"""Running compiled code from Python: the WebGPU kernel runner (the VM arrives with issue 4)."""
