package control

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"time"
)

// ErrNoSwitch means nothing serves the socket: no switch is running
// there.
var ErrNoSwitch = errors.New("no switch is running")

// ErrDenied means the socket's permissions keep the caller out: a
// switch may be running there, but not for this user.
var ErrDenied = errors.New("permission denied")

// RefusedError is the switch's answer to a request it refused.
type RefusedError struct {
	Status  int
	Message string
}

func (e *RefusedError) Error() string { return e.Message }

// Client talks to a switch's API.
type Client struct {
	socket string
	http   *http.Client // requests: bounded in time
	stream *http.Client // streams: as long as the caller's context
}

// NewClient returns a client of the switch serving socket.
func NewClient(socket string) *Client {
	var d net.Dialer
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", socket)
	}}
	return &Client{socket: socket, http: &http.Client{Timeout: 10 * time.Second, Transport: tr}, stream: &http.Client{Transport: tr}}
}

// Get fetches path (e.g. "/v1/stats") into v.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	return c.call(ctx, http.MethodGet, path, nil, v)
}

// Post sends body as JSON to path and decodes the answer into v (if not
// nil).
func (c *Client) Post(ctx context.Context, path string, body, v any) error {
	return c.call(ctx, http.MethodPost, path, body, v)
}

// Patch sends body as JSON to path to change what is there, and decodes
// the answer into v (if not nil).
func (c *Client) Patch(ctx context.Context, path string, body, v any) error {
	return c.call(ctx, http.MethodPatch, path, body, v)
}

// Delete deletes the resource at path (e.g. "/v1/ports/sn1").
func (c *Client) Delete(ctx context.Context, path string) error {
	return c.call(ctx, http.MethodDelete, path, nil, nil)
}

func (c *Client) call(ctx context.Context, method, path string, body, v any) error {
	var in io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s %s: %w", method, path, err)
		}
		in = bytes.NewReader(b)
	}
	resp, err := c.do(ctx, c.http, method, path, in)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s: %s %s: %w", c.socket, method, path, err)
	}
	if v == nil {
		return nil
	}
	if err := json.Unmarshal(out, v); err != nil {
		return fmt.Errorf("%s: %s %s: %w", c.socket, method, path, err)
	}
	return nil
}

// Stream starts a streaming request (/v1/drops, /v1/capture); the
// caller reads and closes the body, and ends the stream by cancelling
// ctx.
func (c *Client) Stream(ctx context.Context, path string) (*http.Response, error) {
	return c.do(ctx, c.stream, http.MethodGet, path, nil)
}

func (c *Client) do(ctx context.Context, hc *http.Client, method, path string, body io.Reader) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://softnet"+path, body)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := hc.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("%s: %w", c.socket, ErrNoSwitch)
		}
		if errors.Is(err, syscall.EACCES) || errors.Is(err, syscall.EPERM) {
			return nil, fmt.Errorf("%s: %w", c.socket, ErrDenied)
		}
		return nil, fmt.Errorf("%s: %w", c.socket, err)
	}
	if resp.StatusCode/100 != 2 {
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		var e Error
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		return nil, &RefusedError{Status: resp.StatusCode, Message: e.Error}
	}
	return resp, nil
}
