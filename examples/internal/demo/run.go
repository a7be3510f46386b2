package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/apigate/ratelimit/access/accessfile"
	"github.com/apigate/ratelimit/httplimit"
)

// DefaultAddr is the address the examples listen on when ADDR is not set:
// loopback only, so that a demo is not exposed by accident.
const DefaultAddr = "127.0.0.1:8080"

// ShutdownTimeout bounds the graceful shutdown: requests still running
// after it are cut off.
const ShutdownTimeout = 10 * time.Second

// Addr returns the address to listen on: $ADDR ("127.0.0.1:8080",
// ":8080", "127.0.0.1:0" for any free port), or DefaultAddr.
func Addr() string {
	if a := os.Getenv("ADDR"); a != "" {
		return a
	}
	return DefaultAddr
}

// DenyFileEnv names the environment variable giving the path of the deny
// list file, in access's line format: one address, CIDR range or client key
// a line, "#" comments.
const DenyFileEnv = "DENY_FILE"

// OpenDenyList loads the deny list file at path and watches it
// (accessfile.Watch), logging its reloads to logger: a new list at Info, a
// bad one at Error, the last good list kept in force. A file that does not
// load is an error naming DenyFileEnv and, for a malformed line, the line.
// Close the DenyList when done.
func OpenDenyList(path string, logger *slog.Logger) (*DenyList, error) {
	f, err := accessfile.Watch(path, accessfile.WithLogger(logger))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", DenyFileEnv, err)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		abs = path
	}
	return &DenyList{File: f, Path: abs}, nil
}

// DenyList is the watched deny list file and its absolute path, for the
// banner.
type DenyList struct {
	*accessfile.File
	Path string
}

// Server is a framework's server as Run drives it. *http.Server is one;
// a Fiber app takes a few lines of adaptation (see examples/fiber).
type Server interface {
	// Serve serves the connections accepted on ln until Shutdown is
	// called; it then returns nil or http.ErrServerClosed.
	Serve(ln net.Listener) error
	// Shutdown stops accepting connections and waits for the requests in
	// flight, or for ctx to end.
	Shutdown(ctx context.Context) error
}

// HTTPServer returns an *http.Server for h, with the timeouts a server
// facing clients directly needs.
func HTTPServer(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
	}
}

// Run is the main function of an example: it opens the store (Redis when
// REDIS_URL is set, memory otherwise) and, when DENY_FILE is set, the deny
// list (OpenDenyList, logging to stderr), builds the limiters of
// DefaultPolicies, with the deny list in Limiters.Guard, listens on Addr,
// prints the banner, serves newServer's server until SIGINT or SIGTERM,
// then shuts it down gracefully (within ShutdownTimeout) and closes the
// deny list and the store. It returns the exit code: 0 after a graceful
// shutdown, 1 after an error (a malformed deny list file among them),
// which it prints on stderr.
func Run(framework string, newServer func(Limiters) Server) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		<-ctx.Done()
		stop() // from the first signal on, a second one kills at once
	}()
	env := environment{addr: Addr(), redisURL: os.Getenv("REDIS_URL"), denyFile: os.Getenv(DenyFileEnv)}
	if err := run(ctx, os.Stdout, os.Stderr, framework, env, newServer); err != nil {
		fmt.Fprintf(os.Stderr, "%s example: %v\n", framework, err)
		return 1
	}
	return 0
}

// environment is what Run reads from the environment.
type environment struct {
	addr     string // ADDR, or DefaultAddr
	redisURL string // REDIS_URL: "" for the memory store
	denyFile string // DENY_FILE: "" for no deny list
}

// run is Run with its environment passed in; the deny list logs to
// stderr. It serves until ctx ends.
func run(ctx context.Context, stdout, stderr io.Writer, framework string, env environment, newServer func(Limiters) Server) (err error) {
	var deny *DenyList
	if env.denyFile != "" {
		if deny, err = OpenDenyList(env.denyFile, slog.New(slog.NewTextHandler(stderr, nil))); err != nil {
			return err
		}
		defer func() {
			if cerr := deny.Close(); cerr != nil && err == nil {
				err = fmt.Errorf("closing the deny list: %w", cerr)
			}
		}()
	}
	store, err := OpenStore(ctx, env.redisURL)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("closing the store: %w", cerr)
		}
	}()

	p := DefaultPolicies()
	l, err := NewLimiters(store.Store, p)
	if err != nil {
		return err
	}
	if deny != nil {
		l.Guard = []httplimit.Option{httplimit.WithDenyList(deny)}
	}
	srv := newServer(l)

	ln, err := net.Listen("tcp", env.addr)
	if err != nil {
		return err
	}
	if err := WriteBanner(stdout, framework, ln.Addr(), store.Name, deny, p); err != nil {
		_ = ln.Close()
		return err
	}

	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served: // failed before any shutdown was asked
		if err == nil || errors.Is(err, http.ErrServerClosed) {
			err = errors.New("server stopped on its own")
		}
		return err
	case <-ctx.Done():
	}

	fmt.Fprintln(stdout, "shutting down...")
	sctx, cancel := context.WithTimeout(context.Background(), ShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	select {
	case err := <-served:
		if err != nil && !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-sctx.Done():
		return errors.New("shutdown: the server did not stop in time")
	}
	fmt.Fprintln(stdout, "stopped")
	return nil
}
