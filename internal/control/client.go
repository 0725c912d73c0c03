package control

import (
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

// RefusedError is the switch's answer to a request it refused.
type RefusedError struct {
	Status  int
	Message string
}

func (e *RefusedError) Error() string { return e.Message }

// Client talks to a switch's API.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client of the switch serving socket.
func NewClient(socket string) *Client {
	var d net.Dialer
	return &Client{socket: socket, http: &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", socket)
		}},
	}}
}

// Get fetches path (e.g. "/v1/stats") into v.
func (c *Client) Get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://softnet"+path, nil)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			return fmt.Errorf("%s: %w", c.socket, ErrNoSwitch)
		}
		return fmt.Errorf("%s: %w", c.socket, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s: %s: %w", c.socket, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e Error
		if json.Unmarshal(body, &e) != nil || e.Error == "" {
			e.Error = resp.Status
		}
		return &RefusedError{Status: resp.StatusCode, Message: e.Error}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%s: %s: %w", c.socket, path, err)
	}
	return nil
}
