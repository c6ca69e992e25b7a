"""The local agent model on ONNX Runtime: a Llama-architecture GGUF rebuilt as an ONNX graph at first load."""
