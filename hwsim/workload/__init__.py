"""What the model is asked to do: routing decisions and (later) request streams."""
