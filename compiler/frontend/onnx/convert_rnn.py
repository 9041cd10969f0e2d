"""The recurrent networks (RNN, GRU, LSTM), composed of the IR's operators at import."""
