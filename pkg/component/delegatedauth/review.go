package delegatedauth

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// errBusy: MaxInFlight reviews are running.
var errBusy = errors.New("too many reviews in flight")

// user is who a token belongs to (a TokenReview's status.user).
type user = authenticationv1.UserInfo

type userEntry struct {
	user    *user // nil: not authenticated
	expires time.Time
}

type accessEntry struct {
	allowed bool
	expires time.Time
}

// authenticate returns the token's user, nil when the apiserver says it
// is not authenticated. Both answers are cached.
func (a *Auth) authenticate(ctx context.Context, token string) (*user, error) {
	sum := sha256.Sum256([]byte(token))
	key := hex.EncodeToString(sum[:])
	if v, ok := a.users.Get(key); ok {
		if e := v.(userEntry); a.cfg.Now().Before(e.expires) {
			return e.user, nil
		}
	}
	release, err := a.acquire()
	if err != nil {
		return nil, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	tr, err := a.cfg.TokenReviews.Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{Token: token}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("token review: %w", err)
	}
	var u *user
	if tr.Status.Authenticated {
		u = &tr.Status.User
	}
	a.users.Add(key, userEntry{user: u, expires: a.cfg.Now().Add(a.cfg.CacheTTL)})
	return u, nil
}

// authorize asks whether u may verb the non-resource path. Both answers
// are cached.
func (a *Auth) authorize(ctx context.Context, u *user, verb, path string) (bool, error) {
	key := accessKey(u, verb, path)
	if v, ok := a.access.Get(key); ok {
		if e := v.(accessEntry); a.cfg.Now().Before(e.expires) {
			return e.allowed, nil
		}
	}
	release, err := a.acquire()
	if err != nil {
		return false, err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, a.cfg.Timeout)
	defer cancel()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: u.Username, UID: u.UID, Groups: u.Groups, Extra: extra(u.Extra),
		NonResourceAttributes: &authorizationv1.NonResourceAttributes{Path: path, Verb: verb},
	}}
	res, err := a.cfg.SubjectAccessReviews.Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		return false, fmt.Errorf("subject access review: %w", err)
	}
	allowed := res.Status.Allowed && !res.Status.Denied
	a.access.Add(key, accessEntry{allowed: allowed, expires: a.cfg.Now().Add(a.cfg.CacheTTL)})
	return allowed, nil
}

// acquire takes a review slot or fails at once with errBusy.
func (a *Auth) acquire() (func(), error) {
	select {
	case a.inFlight <- struct{}{}:
		return func() { <-a.inFlight }, nil
	default:
		return nil, errBusy
	}
}

func extra(in map[string]authenticationv1.ExtraValue) map[string]authorizationv1.ExtraValue {
	if len(in) == 0 {
		return nil
	}
	out := make(map[string]authorizationv1.ExtraValue, len(in))
	for k, v := range in {
		out[k] = authorizationv1.ExtraValue(v)
	}
	return out
}

// accessKey identifies one question: the whole user (name, uid, groups,
// extra), the verb and the path, each part length-prefixed so no two
// questions share a key.
func accessKey(u *user, verb, path string) string {
	var b strings.Builder
	add := func(s string) { fmt.Fprintf(&b, "%d:%s", len(s), s) }
	add(u.Username)
	add(u.UID)
	add(verb)
	add(path)
	fmt.Fprintf(&b, "g%d", len(u.Groups))
	for _, g := range u.Groups {
		add(g)
	}
	for _, k := range slices.Sorted(maps.Keys(u.Extra)) {
		add(k)
		fmt.Fprintf(&b, "v%d", len(u.Extra[k]))
		for _, v := range u.Extra[k] {
			add(v)
		}
	}
	sum := sha256.Sum256([]byte(b.String()))
	return hex.EncodeToString(sum[:])
}
