package core

import (
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestSamePolicy: samePolicy is ==, field by field: a policy that differs
// in any one exported field differs (a field added to Policy and not to
// samePolicy fails here).
func TestSamePolicy(t *testing.T) {
	p := Policy{Name: "api", Algorithm: TokenBucket, Limit: 10, Window: time.Minute, Burst: 20,
		Lockout: time.Second, LockoutMax: time.Minute, LockoutMemory: time.Hour, FailClosed: time.Second}
	q := p
	assert.True(t, samePolicy(&p, &q))
	typ := reflect.TypeFor[Policy]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		q := p
		v := reflect.ValueOf(&q).Elem().Field(i)
		switch v.Kind() {
		case reflect.String:
			v.SetString(v.String() + "x")
		case reflect.Int64:
			v.SetInt(v.Int() + 1)
		default:
			t.Fatalf("field %s of kind %s: teach this test and samePolicy", f.Name, v.Kind())
		}
		assert.False(t, samePolicy(&p, &q), "differs in %s", f.Name)
		assert.Equal(t, p == q, samePolicy(&p, &q), f.Name)
	}
}
