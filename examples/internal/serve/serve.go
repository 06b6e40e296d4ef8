// Package serve runs an HTTP handler on a controller-runtime Manager, on
// the elected leader or on every replica, stopped with the Manager.
package serve

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"
)

// Server serves Handler on Listener as a Manager's runnable.
type Server struct {
	Handler  http.Handler
	Listener net.Listener
	// Leader serves on the elected leader only (where the watcher runs,
	// with leader election).
	Leader bool
}

// NeedLeaderElection says whether it runs on the leader only.
func (s Server) NeedLeaderElection() bool { return s.Leader }

// Start serves until ctx ends, then shuts down within five seconds. The
// requests' context is the runnable's (its logger), never cancelled by it.
func (s Server) Start(ctx context.Context) error {
	srv := &http.Server{Handler: s.Handler, ReadHeaderTimeout: 5 * time.Second,
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(s.Listener); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
