package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// client calls the API with the secret key.
type client struct {
	base string
	key  string
	http *http.Client
}

func newClient(base, key string) *client {
	return &client{base: strings.TrimRight(base, "/"), key: key, http: &http.Client{Timeout: 30 * time.Second}}
}

// apiError is the contract's error body.
type apiError struct {
	Status    int
	Code      string `json:"code"`
	Message   string `json:"message"`
	Param     string `json:"param"`
	RequestID string `json:"request_id"`
}

func (e *apiError) Error() string {
	s := fmt.Sprintf("%s (%d %s", e.Message, e.Status, e.Code)
	if e.Param != "" {
		s += ", param " + e.Param
	}
	if e.RequestID != "" {
		s += ", request " + e.RequestID
	}
	return s + ")"
}

// do sends a request with a JSON body (nil for none) and decodes a 2xx
// answer into out (nil to skip); it returns the raw answer too.
func (c *client) do(ctx context.Context, method, path string, body any, headers map[string]string, out any) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.key)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, fmt.Errorf("cannot reach the API at %s: %w", c.base, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 300 {
		var e struct {
			Error apiError `json:"error"`
		}
		if json.Unmarshal(raw, &e) != nil || e.Error.Code == "" {
			return raw, fmt.Errorf("%s %s: HTTP %d from %s", method, path, resp.StatusCode, c.base)
		}
		e.Error.Status = resp.StatusCode
		return raw, &e.Error
	}
	if out != nil {
		if err := json.Unmarshal(raw, out); err != nil {
			return raw, fmt.Errorf("%s %s: unexpected answer: %w", method, path, err)
		}
	}
	return raw, nil
}
