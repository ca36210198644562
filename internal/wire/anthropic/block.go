package anthropic

import (
	"encoding/json"

	"github.com/layer0ai/layer0/internal/llm"
	"github.com/layer0ai/layer0/internal/wire/jsontext"
)

// blockCtx is where a list of content blocks appears; it decides which block types are allowed.
type blockCtx uint8

const (
	ctxMessage    blockCtx = iota // messages.N.content: every supported type
	ctxToolResult                 // a tool_result's content: text, image, document
	ctxDocument                   // a document's content source: text, image
	ctxSystem                     // the system prompt: text
)

// Block members, across all block types: a block is read in one pass whatever order its members
// come in (the Go SDK sends "type" last), and checked against its type at the end.
const (
	mType uint32 = 1 << iota
	mText
	mSource
	mID
	mName
	mInput
	mToolUseID
	mContent
	mIsError
	mCacheControl
	mCitations
	mTitle
	mContext
	mThinking
	mSignature
	mData
	mCaller
	mToolsetName
)

func memberBit(k string) uint32 {
	switch k {
	case "type":
		return mType
	case "text":
		return mText
	case "source":
		return mSource
	case "id":
		return mID
	case "name":
		return mName
	case "input":
		return mInput
	case "tool_use_id":
		return mToolUseID
	case "content":
		return mContent
	case "is_error":
		return mIsError
	case "cache_control":
		return mCacheControl
	case "citations":
		return mCitations
	case "title":
		return mTitle
	case "context":
		return mContext
	case "thinking":
		return mThinking
	case "signature":
		return mSignature
	case "data":
		return mData
	case "caller":
		return mCaller
	case "toolset_name":
		return mToolsetName
	}
	return 0
}

// allowedMembers returns the members a block of type typ may have (0 for an unknown type).
func allowedMembers(typ string) uint32 {
	switch typ {
	case "text":
		return mType | mText | mCacheControl | mCitations
	case "image":
		return mType | mSource | mCacheControl
	case "tool_use":
		return mType | mID | mName | mInput | mCacheControl | mCaller | mToolsetName
	case "tool_result":
		return mType | mToolUseID | mContent | mIsError | mCacheControl | mToolsetName
	case "document":
		return mType | mSource | mTitle | mContext | mCitations | mCacheControl
	case "thinking":
		return mType | mThinking | mSignature | mCacheControl
	case "redacted_thinking":
		return mType | mData | mCacheControl
	}
	return 0
}

// typeAllowed reports whether a block type may appear in the context.
func (c blockCtx) typeAllowed(typ string) bool {
	switch c {
	case ctxSystem:
		return typ == "text"
	case ctxDocument:
		return typ == "text" || typ == "image"
	case ctxToolResult:
		return typ == "text" || typ == "image" || typ == "document"
	}
	return allowedMembers(typ) != 0
}

func (c blockCtx) want() string {
	switch c {
	case ctxSystem:
		return `"text"`
	case ctxDocument:
		return `"text" or "image"`
	case ctxToolResult:
		return `"text", "image" or "document"`
	}
	return `one of "text", "image", "tool_use", "tool_result", "document", "thinking" or "redacted_thinking"`
}

// contentInfo describes a content list beyond its blocks.
type contentInfo struct {
	empty      bool // the content was "" or [], or mapped to no blocks
	toolUse    int  // index of the first tool_use block, or -1
	toolResult int  // index of the first tool_result block, or -1
}

// content reads a string or an array of content blocks. depth counts the enclosing block
// lists, bounding the recursion through tool_result and document content.
func (d *decoder) content(ctx blockCtx, depth int) ([]llm.Block, contentInfo, error) {
	info := contentInfo{toolUse: -1, toolResult: -1}
	switch k := d.Peek(); k {
	case jsontext.KindString:
		s, err := d.Str()
		if err != nil {
			return nil, info, d.syntax(err)
		}
		if s == "" {
			info.empty = true
			return nil, info, nil
		}
		return d.oneText(s), info, nil
	case jsontext.KindArray:
		d.Pos++
	default:
		want := "a string or an array of content blocks"
		if ctx == ctxSystem {
			want = "a string or an array of text blocks"
		}
		return nil, info, d.typeErr(want, k)
	}
	var blocks []llm.Block
	n := 0
	for {
		ok, err := d.elem(&n)
		if err != nil {
			return nil, info, err
		}
		if !ok {
			break
		}
		before := len(blocks)
		if blocks, err = d.block(blocks, ctx, depth); err != nil {
			return nil, info, err
		}
		d.Leave()
		if len(blocks) > before {
			switch blocks[before].Type {
			case llm.BlockToolUse:
				if info.toolUse < 0 {
					info.toolUse = n - 1
				}
			case llm.BlockToolResult:
				if info.toolResult < 0 {
					info.toolResult = n - 1
				}
			}
		}
	}
	// Content that maps to nothing (only thinking blocks) counts as empty, like [].
	info.empty = len(blocks) == 0
	return blocks, info, nil
}

// rawBlock collects a block's members before its type is checked.
type rawBlock struct {
	seen      uint32
	typ       string
	text      string
	id        string
	name      string
	toolUseID string
	input     json.RawMessage
	isError   bool
	content   []llm.Block
	src       rawSource
}

// rawSource is an image or document source.
type rawSource struct {
	typ, mediaType, data, url string
	hasType, hasData, hasURL  bool
	content                   []llm.Block
	hasContent                bool
}

// block reads one content block and appends what it maps to: usually one block, none for
// thinking blocks, and the content of a document.
func (d *decoder) block(dst []llm.Block, ctx blockCtx, depth int) ([]llm.Block, error) {
	if err := d.object(); err != nil {
		return dst, err
	}
	var b rawBlock
	allowed := ^uint32(0) // until the type is known
	for n := 0; ; {
		k, ok, err := d.key(&n, nil)
		if err != nil {
			return dst, err
		}
		if !ok {
			break
		}
		bit := memberBit(k)
		if bit&allowed == 0 {
			return dst, d.extra()
		}
		if b.seen&bit != 0 {
			return dst, d.duplicate()
		}
		b.seen |= bit
		switch bit {
		case mType:
			if b.typ, err = d.readString(); err != nil {
				return dst, err
			}
			if !ctx.typeAllowed(b.typ) {
				return dst, d.fail("must be %s, got %q", ctx.want(), clipString(b.typ))
			}
			allowed = allowedMembers(b.typ)
			if extraBits := b.seen &^ allowed; extraBits != 0 {
				d.Leave()
				return dst, d.extraMember(extraBits)
			}
		case mText:
			b.text, err = d.readString()
		case mID:
			b.id, err = d.readString()
		case mName:
			b.name, err = d.readString()
		case mToolUseID:
			b.toolUseID, err = d.readString()
		case mInput:
			b.input, err = d.rawObject()
		case mIsError:
			b.isError, err = d.readBool()
		case mContent:
			if depth >= 1 { // only a message's tool_result has content
				return dst, d.extra()
			}
			if !d.null() {
				b.content, _, err = d.content(ctxToolResult, depth+1)
			}
		case mSource:
			err = d.source(&b.src, depth)
		default:
			err = d.skipValue()
		}
		if err != nil {
			return dst, err
		}
		d.Leave()
	}
	if b.seen&mType == 0 {
		return dst, d.required("type")
	}
	return d.appendBlock(&b, dst)
}

// extraMember reports the first member in bits as not permitted.
func (d *decoder) extraMember(bits uint32) error {
	for _, k := range [...]string{"type", "text", "source", "id", "name", "input", "tool_use_id",
		"content", "is_error", "cache_control", "citations", "title", "context", "thinking",
		"signature", "data", "caller", "toolset_name"} {
		if memberBit(k)&bits != 0 {
			d.Enter(k)
			break
		}
	}
	return d.extra()
}

// appendBlock validates the block against its type and appends what it maps to.
func (d *decoder) appendBlock(b *rawBlock, dst []llm.Block) ([]llm.Block, error) {
	switch b.typ {
	case "text":
		switch {
		case b.seen&mText == 0:
			return dst, d.required("text")
		case b.text == "":
			return dst, d.failAt("text", "text content blocks must be non-empty")
		}
		return append(dst, llm.Block{Type: llm.BlockText, Text: b.text}), nil
	case "image":
		if b.seen&mSource == 0 {
			return dst, d.required("source")
		}
		d.Enter("source")
		blk, err := d.image(&b.src)
		if err != nil {
			return dst, err
		}
		d.Leave()
		return append(dst, blk), nil
	case "tool_use":
		switch {
		case b.seen&mID == 0:
			return dst, d.required("id")
		case !llm.ValidID(b.id):
			return dst, d.failAt("id", "must match ^[a-zA-Z0-9_-]+$, got %q", clipString(b.id))
		case b.seen&mName == 0:
			return dst, d.required("name")
		case b.name == "":
			return dst, d.failAt("name", "must be non-empty")
		case b.seen&mInput == 0:
			return dst, d.required("input")
		}
		return append(dst, llm.Block{Type: llm.BlockToolUse, ID: b.id, Name: b.name, Input: b.input}), nil
	case "tool_result":
		switch {
		case b.seen&mToolUseID == 0:
			return dst, d.required("tool_use_id")
		case !llm.ValidID(b.toolUseID):
			return dst, d.failAt("tool_use_id", "must match ^[a-zA-Z0-9_-]+$, got %q", clipString(b.toolUseID))
		}
		return append(dst, llm.Block{Type: llm.BlockToolResult, ToolUseID: b.toolUseID,
			Content: b.content, IsError: b.isError}), nil
	case "document":
		if b.seen&mSource == 0 {
			return dst, d.required("source")
		}
		d.Enter("source")
		dst, err := d.document(&b.src, dst)
		if err != nil {
			return dst, err
		}
		d.Leave()
		return dst, nil
	}
	// thinking and redacted_thinking: layer0's engines cannot use another model's reasoning.
	return dst, nil
}

// source reads an image or document source; which members it may have is checked by image and
// document once the block's type is known.
func (d *decoder) source(s *rawSource, depth int) error {
	if err := d.object(); err != nil {
		return err
	}
	return d.members(func(k string) (err error) {
		switch k {
		case "type":
			s.typ, err = d.readString()
			s.hasType = true
		case "media_type":
			s.mediaType, err = d.readString()
		case "data":
			s.data, err = d.readString()
			s.hasData = true
		case "url":
			s.url, err = d.readString()
			s.hasURL = true
		case "content":
			if depth >= 2 { // a document's content holds no further documents
				return d.extra()
			}
			s.content, _, err = d.content(ctxDocument, depth+1)
			s.hasContent = true
		case "file_id":
			err = d.skipValue()
		default:
			return d.extra()
		}
		return err
	})
}

// extraAt reports the member key of the current object as not permitted.
func (d *decoder) extraAt(key string) error {
	d.Enter(key)
	return d.extra()
}

// image validates an image source and returns its block.
func (d *decoder) image(s *rawSource) (llm.Block, error) {
	if !s.hasType {
		return llm.Block{}, d.required("type")
	}
	switch s.typ {
	case "base64":
		switch {
		case s.hasURL:
			return llm.Block{}, d.extraAt("url")
		case s.hasContent:
			return llm.Block{}, d.extraAt("content")
		case s.mediaType == "":
			return llm.Block{}, d.required("media_type")
		case !llm.ImageMediaType(s.mediaType):
			return llm.Block{}, d.failAt("media_type", "must be one of %s, got %q", llm.ImageMediaTypes, clipString(s.mediaType))
		case !s.hasData:
			return llm.Block{}, d.required("data")
		case !llm.ImageBase64(s.data):
			return llm.Block{}, d.failAt("data", "must be non-empty base64 (standard alphabet, padded)")
		}
		return llm.Block{Type: llm.BlockImage, MediaType: s.mediaType, Data: s.data}, nil
	case "url":
		switch {
		case s.hasData:
			return llm.Block{}, d.extraAt("data")
		case s.mediaType != "":
			return llm.Block{}, d.extraAt("media_type")
		case s.hasContent:
			return llm.Block{}, d.extraAt("content")
		case !s.hasURL:
			return llm.Block{}, d.required("url")
		case !llm.ImageURL(s.url):
			return llm.Block{}, d.failAt("url", "must be an http or https URL")
		}
		return llm.Block{Type: llm.BlockImage, URL: s.url}, nil
	case "file":
		return llm.Block{}, d.failAt("type", `file sources are not supported; send "base64" or "url"`)
	}
	return llm.Block{}, d.failAt("type", `must be "base64" or "url", got %q`, clipString(s.typ))
}

// document maps a document with a text or content source to text (and image) blocks. PDFs and
// files are refused: no engine behind layer0 can read them.
func (d *decoder) document(s *rawSource, dst []llm.Block) ([]llm.Block, error) {
	if !s.hasType {
		return dst, d.required("type")
	}
	switch s.typ {
	case "text":
		switch {
		case s.hasURL:
			return dst, d.extraAt("url")
		case s.hasContent:
			return dst, d.extraAt("content")
		case s.mediaType != "" && s.mediaType != "text/plain":
			return dst, d.failAt("media_type", `must be "text/plain", got %q`, clipString(s.mediaType))
		case !s.hasData:
			return dst, d.required("data")
		case s.data == "":
			return dst, d.failAt("data", "must be non-empty")
		}
		return append(dst, llm.Block{Type: llm.BlockText, Text: s.data}), nil
	case "content":
		switch {
		case s.hasURL:
			return dst, d.extraAt("url")
		case s.hasData:
			return dst, d.extraAt("data")
		case s.mediaType != "":
			return dst, d.extraAt("media_type")
		case !s.hasContent:
			return dst, d.required("content")
		case len(s.content) == 0:
			return dst, d.failAt("content", "must be non-empty")
		}
		return append(dst, s.content...), nil
	case "base64", "url", "file":
		return dst, d.failAt("type",
			`document source %q is not supported; send the document as text (source type "text" or "content")`, s.typ)
	}
	return dst, d.failAt("type", `must be "text" or "content", got %q`, clipString(s.typ))
}
