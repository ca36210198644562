package llm

// EmbedRequest is a canonical embeddings request (OpenAI's POST /v1/embeddings): one vector per
// input text.
type EmbedRequest struct {
	Model string
	// Input holds the texts, at least one, none empty.
	Input []string
	// Dimensions is the length asked for the vectors; 0 leaves it to the model.
	Dimensions int
	// User is the end user's id, passed on to engines that take it.
	User string
}

// Embeddings is an embeddings answer: one vector per input, in the input's order.
type Embeddings struct {
	// Model is the model that answered, as the engine names it.
	Model   string
	Vectors [][]float32
	// InputTokens is the engine's count of the input's tokens.
	InputTokens int
}
