package anthropic

import (
	"net/url"
	"strconv"
	"time"

	"github.com/layer0ai/layer0/internal/apierr"
)

// Model is one entry of GET /v1/models.
type Model struct {
	ID          string
	DisplayName string
	Created     time.Time
}

// AppendModel appends {"type":"model","id":…,"display_name":…,"created_at":…}, the body of
// GET /v1/models/{id} and one element of the list. created_at is RFC 3339 in UTC.
func AppendModel(dst []byte, m Model) []byte {
	dst = append(dst, `{"type":"model","id":`...)
	dst = appendString(dst, m.ID)
	dst = append(dst, `,"display_name":`...)
	dst = appendString(dst, m.DisplayName)
	dst = append(dst, `,"created_at":"`...)
	dst = m.Created.UTC().AppendFormat(dst, time.RFC3339)
	return append(dst, '"', '}')
}

// Model list paging, as the real API does it.
const (
	defaultListLimit = 20
	maxListLimit     = 1000
)

// AppendModelList appends one page of the model list for the query q, in the order of all:
// {"data":[…],"has_more":…,"first_id":…,"last_id":…}. limit (1..1000, default 20) sizes the page;
// after_id returns the page right after that model and before_id the page right before it, with
// has_more saying whether more models lie in that direction (the SDKs page on it). A bad
// parameter is a 400 that names it, and dst is returned unchanged.
func AppendModelList(dst []byte, all []Model, q url.Values) ([]byte, error) {
	limit := defaultListLimit
	if q.Has("limit") {
		v := q.Get("limit")
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > maxListLimit {
			return dst, apierr.Invalid("limit", "must be an integer between 1 and %d, got %q", maxListLimit, clipString(v))
		}
		limit = n
	}
	after, before := q.Get("after_id"), q.Get("before_id")
	if after != "" && before != "" {
		return dst, apierr.Invalid("before_id", "cannot be used together with after_id")
	}
	find := func(param, id string) (int, error) {
		for i := range all {
			if all[i].ID == id {
				return i, nil
			}
		}
		return 0, apierr.Invalid(param, "no model with id %q", clipString(id))
	}
	start, end := 0, min(limit, len(all))
	hasMore := end < len(all)
	switch {
	case after != "":
		i, err := find("after_id", after)
		if err != nil {
			return dst, err
		}
		start = i + 1
		end = min(start+limit, len(all))
		hasMore = end < len(all)
	case before != "":
		i, err := find("before_id", before)
		if err != nil {
			return dst, err
		}
		end = i
		start = max(0, end-limit)
		hasMore = start > 0
	}
	page := all[start:end]
	dst = append(dst, `{"data":[`...)
	for i, m := range page {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = AppendModel(dst, m)
	}
	dst = append(dst, `],"has_more":`...)
	dst = strconv.AppendBool(dst, hasMore)
	dst = append(dst, `,"first_id":`...)
	if len(page) == 0 {
		dst = append(dst, `null,"last_id":null}`...)
		return dst, nil
	}
	dst = appendString(dst, page[0].ID)
	dst = append(dst, `,"last_id":`...)
	dst = appendString(dst, page[len(page)-1].ID)
	return append(dst, '}'), nil
}
