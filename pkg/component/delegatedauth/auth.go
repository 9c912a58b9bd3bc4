package delegatedauth

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	authenticationv1client "k8s.io/client-go/kubernetes/typed/authentication/v1"
	authorizationv1client "k8s.io/client-go/kubernetes/typed/authorization/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	"k8s.io/utils/lru"
)

// DefaultAlwaysAllowPaths are the paths served without authentication:
// the health endpoints and their per-check paths (kube-scheduler's
// default is the three endpoints; gpufabric's per-check paths say no more
// than ?verbose does).
var DefaultAlwaysAllowPaths = []string{"/healthz", "/healthz/*", "/livez", "/livez/*", "/readyz", "/readyz/*"}

// ParsePaths reads a flag's comma-separated path list (for
// Config.AlwaysAllowPaths), dropping blanks; "" gives an empty list.
func ParsePaths(list string) []string {
	out := []string{}
	for _, p := range strings.Split(list, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Defaults of Config.
const (
	DefaultCacheTTL    = 10 * time.Second
	DefaultCacheSize   = 1024
	DefaultMaxInFlight = 8
	DefaultTimeout     = 10 * time.Second
	// reviewQPS and reviewBurst are NewForConfig's client-side rate limit
	// of the review client.
	reviewQPS   = 20
	reviewBurst = 40
)

// Config of an Auth.
type Config struct {
	// TokenReviews and SubjectAccessReviews are the apiserver's review
	// APIs (a clientset's AuthenticationV1().TokenReviews() and
	// AuthorizationV1().SubjectAccessReviews()). Required.
	TokenReviews         authenticationv1client.TokenReviewInterface
	SubjectAccessReviews authorizationv1client.SubjectAccessReviewInterface
	// AlwaysAllowPaths are served to anyone: exact paths, or prefixes
	// ending in "*" ("/livez/*"). Nil: DefaultAlwaysAllowPaths; empty:
	// none.
	AlwaysAllowPaths []string
	// CacheTTL keeps both outcomes of both reviews. Default 10 s.
	CacheTTL time.Duration
	// CacheSize bounds each cache (entries). Default 1024.
	CacheSize int
	// MaxInFlight bounds the reviews running at once. Default 8.
	MaxInFlight int
	// Timeout bounds one review. Default 10 s.
	Timeout time.Duration
	// Logger receives refusals at V(4) and failed reviews at V(2).
	Logger klog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Auth is the filter. Create with New; safe for concurrent use.
type Auth struct {
	cfg      Config
	exact    map[string]bool
	prefixes []string
	users    *lru.Cache // token hash → userEntry
	access   *lru.Cache // access key → accessEntry
	inFlight chan struct{}
}

// New checks cfg and returns its Auth.
func New(cfg Config) (*Auth, error) {
	if cfg.TokenReviews == nil || cfg.SubjectAccessReviews == nil {
		return nil, errors.New("delegated auth needs the TokenReview and SubjectAccessReview APIs")
	}
	if cfg.AlwaysAllowPaths == nil {
		cfg.AlwaysAllowPaths = DefaultAlwaysAllowPaths
	}
	cfg.CacheTTL = orDefault(cfg.CacheTTL, DefaultCacheTTL)
	cfg.Timeout = orDefault(cfg.Timeout, DefaultTimeout)
	cfg.CacheSize = orDefault(cfg.CacheSize, DefaultCacheSize)
	cfg.MaxInFlight = orDefault(cfg.MaxInFlight, DefaultMaxInFlight)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	a := &Auth{cfg: cfg, exact: map[string]bool{}, users: lru.New(cfg.CacheSize), access: lru.New(cfg.CacheSize), inFlight: make(chan struct{}, cfg.MaxInFlight)}
	for _, p := range cfg.AlwaysAllowPaths {
		switch {
		case !strings.HasPrefix(p, "/"):
			return nil, fmt.Errorf("always-allow path %q does not start with /", p)
		case strings.Contains(strings.TrimSuffix(p, "*"), "*"):
			return nil, fmt.Errorf("always-allow path %q: only a trailing * is allowed", p)
		case strings.HasSuffix(p, "*"):
			a.prefixes = append(a.prefixes, strings.TrimSuffix(p, "*"))
		default:
			a.exact[p] = true
		}
	}
	return a, nil
}

func orDefault[T int | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}

// NewForConfig is New with review clients made from a copy of restCfg
// with their own client-side rate limit (20 QPS, burst 40), so reviews
// never spend the component's API budget.
func NewForConfig(restCfg *rest.Config, cfg Config) (*Auth, error) {
	c := rest.CopyConfig(restCfg)
	c.QPS, c.Burst, c.RateLimiter = reviewQPS, reviewBurst, nil
	c.UserAgent = rest.DefaultKubernetesUserAgent() + " delegated-auth"
	if restCfg.UserAgent != "" {
		c.UserAgent = restCfg.UserAgent + " delegated-auth"
	}
	authn, err := authenticationv1client.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("token review client: %w", err)
	}
	authz, err := authorizationv1client.NewForConfig(c)
	if err != nil {
		return nil, fmt.Errorf("access review client: %w", err)
	}
	cfg.TokenReviews, cfg.SubjectAccessReviews = authn.TokenReviews(), authz.SubjectAccessReviews()
	return New(cfg)
}

// AlwaysAllowed reports whether path is served without authentication.
func (a *Auth) AlwaysAllowed(path string) bool {
	if a.exact[path] {
		return true
	}
	for _, p := range a.prefixes {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}

// Wrap returns next behind the filter.
func (a *Auth) Wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if a.AlwaysAllowed(r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := bearerToken(r)
		if !ok {
			refuse(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		u, err := a.authenticate(r.Context(), token)
		switch {
		case errors.Is(err, errBusy):
			w.Header().Set("Retry-After", "1")
			refuse(w, http.StatusTooManyRequests, "too many requests under review, try again later")
			return
		case err != nil:
			a.cfg.Logger.V(2).Info("Token review failed", "path", r.URL.Path, "err", err)
			refuse(w, http.StatusUnauthorized, "Unauthorized")
			return
		case u == nil:
			a.cfg.Logger.V(4).Info("Unauthenticated request refused", "path", r.URL.Path, "remote", r.RemoteAddr)
			refuse(w, http.StatusUnauthorized, "Unauthorized")
			return
		}
		verb := strings.ToLower(r.Method)
		allowed, err := a.authorize(r.Context(), u, verb, r.URL.Path)
		switch {
		case errors.Is(err, errBusy):
			w.Header().Set("Retry-After", "1")
			refuse(w, http.StatusTooManyRequests, "too many requests under review, try again later")
		case err != nil:
			a.cfg.Logger.V(2).Info("Access review failed", "path", r.URL.Path, "user", u.Username, "err", err)
			refuse(w, http.StatusInternalServerError, "Internal Server Error: the access review failed")
		case !allowed:
			a.cfg.Logger.V(4).Info("Request forbidden", "path", r.URL.Path, "user", u.Username)
			refuse(w, http.StatusForbidden, fmt.Sprintf("forbidden: User %q cannot %s path %q", u.Username, verb, r.URL.Path))
		default:
			next.ServeHTTP(w, r)
		}
	})
}

// bearerToken reads "Authorization: Bearer <token>".
func bearerToken(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(r.Header.Get("Authorization")), " ")
	token = strings.TrimSpace(token)
	if !ok || !strings.EqualFold(scheme, "bearer") || token == "" {
		return "", false
	}
	return token, true
}

func refuse(w http.ResponseWriter, code int, msg string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_, _ = fmt.Fprintln(w, msg)
}
