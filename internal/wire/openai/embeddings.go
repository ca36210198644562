package openai

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"math"
	"strconv"
	"strings"

	"github.com/layer0ai/layer0/internal/apierr"
	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// The embeddings API (POST /v1/embeddings): the request's input is a string or an array of
// strings; the answer is {"object":"list","data":[{"object":"embedding","index":i,
// "embedding":[…]}],"model":…,"usage":{"prompt_tokens":n,"total_tokens":n}}, each embedding an
// array of numbers, or with encoding_format "base64" the base64 of its little-endian float32s.

// Bounds of an embeddings request, as the OpenAI API sets them.
const (
	// MaxEmbedInputs is the most texts one request may embed.
	MaxEmbedInputs = 2048
	// MaxEmbedDimensions is the largest dimensions accepted.
	MaxEmbedDimensions = 65536
)

type embedRequest struct {
	Model, EncodingFormat, User Opt[string]
	Dimensions                  Opt[int]
	Input                       Lenient[[]Opt[string]] // an element not a string has ok false
}

// DecodeEmbeddings decodes and validates the body of POST /v1/embeddings. base64 reports
// encoding_format "base64" (the answer's encoding; engines are always asked for floats). Token
// arrays as input are refused: layer0's engines embed text. Errors are 400s naming the field.
// The inputs point into one copy of body, which is not retained.
func DecodeEmbeddings(body []byte) (r *llm.EmbedRequest, base64 bool, err error) {
	d := NewDecoder(body)
	var er embedRequest
	if err := d.Finish(d.embedRequest(&er)); err != nil {
		return nil, false, err
	}
	if !er.Model.OK || er.Model.V == "" {
		return nil, false, apierr.Invalid("model", "required")
	}
	r = &llm.EmbedRequest{Model: strings.Clone(er.Model.V)}
	if r.Input, err = embedInput(&er.Input); err != nil {
		return nil, false, err
	}
	if d := er.Dimensions; d.OK {
		if d.V < 1 || d.V > MaxEmbedDimensions {
			return nil, false, apierr.Invalid("dimensions", "must be 1 to %d, got %d", MaxEmbedDimensions, d.V)
		}
		r.Dimensions = d.V
	}
	if f := er.EncodingFormat; f.OK {
		switch f.V {
		case "float":
		case "base64":
			base64 = true
		default:
			return nil, false, apierr.Invalid("encoding_format", `must be "float" or "base64", got %.64q`, f.V)
		}
	}
	if er.User.OK {
		r.User = strings.Clone(er.User.V)
	}
	return r, base64, nil
}

var embedFields = [...]string{"model", "input", "dimensions", "encoding_format", "user"}

// embedRequest reads an embeddings request body into er.
func (d *Decoder) embedRequest(er *embedRequest) error {
	return d.ObjectMembers("", embedFields[:], func(_ string, i int) (err error) {
		switch i {
		case 0:
			er.Model.V, er.Model.OK, err = d.String("model")
		case 1:
			var more bool
			if more, err = Leniently(d, &er.Input, jsontext.KindArray, ShapeRaw); more {
				err = d.Elems(func() error {
					var s Opt[string]
					var bad bool
					s.V, s.OK, err = d.LenientString(&bad)
					er.Input.V = append(er.Input.V, s)
					return err
				})
			}
		case 2:
			er.Dimensions.V, er.Dimensions.OK, err = d.Int("dimensions")
		case 3:
			er.EncodingFormat.V, er.EncodingFormat.OK, err = d.String("encoding_format")
		case 4:
			er.User.V, er.User.OK, err = d.String("user")
		default:
			err = d.Skip(ShapeRaw)
		}
		return err
	})
}

// embedInput checks input: a non-empty string, or 1 to MaxEmbedInputs non-empty strings.
func embedInput(l *Lenient[[]Opt[string]]) ([]string, error) {
	switch {
	case !l.Given:
		return nil, apierr.Invalid("input", "required")
	case l.IsStr:
		if l.Str == "" {
			return nil, apierr.Invalid("input", "must not be empty")
		}
		return []string{l.Str}, nil
	case l.Bad:
		return nil, apierr.Invalid("input", "must be a string or an array of strings")
	case len(l.V) == 0:
		return nil, apierr.Invalid("input", "must not be empty")
	case len(l.V) > MaxEmbedInputs:
		return nil, apierr.Invalid("input", "at most %d inputs, got %d", MaxEmbedInputs, len(l.V))
	}
	out := make([]string, len(l.V))
	for i, v := range l.V {
		if !v.OK {
			return nil, apierr.Invalid("input["+strconv.Itoa(i)+"]",
				"must be a string: token arrays are not supported, send the text")
		}
		if v.V == "" {
			return nil, apierr.Invalid("input["+strconv.Itoa(i)+"]", "must be a non-empty string")
		}
		out[i] = v.V
	}
	return out, nil
}

// AppendEmbedRequest appends the embeddings request an OpenAI-compatible engine gets for r, with
// r.Model as the model and float vectors asked for.
func AppendEmbedRequest(dst []byte, r *llm.EmbedRequest) []byte {
	dst = append(dst, `{"model":`...)
	dst = appendString(dst, r.Model)
	dst = append(dst, `,"input":`...)
	dst = jsontext.AppendStrings(dst, r.Input)
	dst = append(dst, `,"encoding_format":"float"`...)
	if r.Dimensions > 0 {
		dst = append(dst, `,"dimensions":`...)
		dst = strconv.AppendInt(dst, int64(r.Dimensions), 10)
	}
	if r.User != "" {
		dst = append(dst, `,"user":`...)
		dst = appendString(dst, r.User)
	}
	return append(dst, '}')
}

// ReadEmbeddings reads an engine's embeddings answer for n inputs: float vectors (or base64 ones,
// which some servers send whatever was asked), placed by their index.
func ReadEmbeddings(body []byte, n int) (*llm.Embeddings, error) {
	var a struct {
		Model string `json:"model"`
		Data  []struct {
			Index     int             `json:"index"`
			Embedding json.RawMessage `json:"embedding"`
		} `json:"data"`
		Usage struct {
			PromptTokens int `json:"prompt_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(body, &a); err != nil {
		return nil, apierr.Wrap(apierr.BadGateway, err, "the engine's embeddings answer is not valid JSON")
	}
	if len(a.Data) != n {
		return nil, apierr.New(apierr.BadGateway, "the engine answered %d embeddings for %d inputs", len(a.Data), n)
	}
	e := &llm.Embeddings{Model: a.Model, Vectors: make([][]float32, n), InputTokens: a.Usage.PromptTokens}
	for _, d := range a.Data {
		if d.Index < 0 || d.Index >= n || e.Vectors[d.Index] != nil {
			return nil, apierr.New(apierr.BadGateway, "the engine's embeddings answer has a bad or repeated index %d", d.Index)
		}
		v, err := readVector(d.Embedding)
		if err != nil {
			return nil, apierr.Wrap(apierr.BadGateway, err, "the engine's embedding %d cannot be read", d.Index)
		}
		e.Vectors[d.Index] = v
	}
	return e, nil
}

func readVector(raw json.RawMessage) ([]float32, error) {
	if len(raw) > 0 && raw[0] == '"' {
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, err
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, err
		}
		v := make([]float32, len(b)/4)
		for i := range v {
			v[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
		}
		return v, nil
	}
	var v []float32
	err := json.Unmarshal(raw, &v)
	return v, err
}

// AppendEmbeddings appends the answer to an embeddings request under model, each vector as an
// array of numbers or, with asBase64, as the base64 of its little-endian float32s.
func AppendEmbeddings(dst []byte, e *llm.Embeddings, model string, asBase64 bool) []byte {
	dst = append(dst, `{"object":"list","data":[`...)
	var raw []byte
	for i, v := range e.Vectors {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, `{"object":"embedding","index":`...)
		dst = strconv.AppendInt(dst, int64(i), 10)
		dst = append(dst, `,"embedding":`...)
		if asBase64 {
			raw = raw[:0]
			for _, f := range v {
				raw = binary.LittleEndian.AppendUint32(raw, math.Float32bits(f))
			}
			dst = append(dst, '"')
			dst = base64.StdEncoding.AppendEncode(dst, raw)
			dst = append(dst, '"')
		} else {
			dst = append(dst, '[')
			for j, f := range v {
				if j > 0 {
					dst = append(dst, ',')
				}
				dst = strconv.AppendFloat(dst, float64(f), 'g', -1, 32)
			}
			dst = append(dst, ']')
		}
		dst = append(dst, '}')
	}
	dst = append(dst, `],"model":`...)
	dst = appendString(dst, model)
	dst = append(dst, `,"usage":{"prompt_tokens":`...)
	dst = strconv.AppendInt(dst, int64(e.InputTokens), 10)
	dst = append(dst, `,"total_tokens":`...)
	dst = strconv.AppendInt(dst, int64(e.InputTokens), 10)
	return append(dst, `}}`...)
}
