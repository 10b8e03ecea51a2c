package wheelq

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/wheelq/wheelq/internal/crashpoint"
)

// pureStoreMethods are the engineStore methods that do no I/O: a dead
// queue may still call them.
var pureStoreMethods = map[string]bool{"Partitions": true, "PartitionOf": true, "Keys": true}

// TestCrashStoreRefusesEveryCall: once a queue with Config.Testing is
// dead, every call to Redis is refused, whatever method it is (a killed
// process sends nothing). The crash store wraps an engineStore that is
// nil: a method it does not define itself is promoted from the nil
// interface and panics, so a method added to engineStore and not to the
// crash store fails here by name.
func TestCrashStoreRefusesEveryCall(t *testing.T) {
	h := crashpoint.New(nil, nil)
	h.Kill()
	var s engineStore = &crashStore{h: h}
	it := reflect.TypeFor[engineStore]()
	v := reflect.ValueOf(s)
	for i := range it.NumMethod() {
		m := it.Method(i)
		if pureStoreMethods[m.Name] {
			continue
		}
		t.Run(m.Name, func(t *testing.T) {
			in := make([]reflect.Value, m.Type.NumIn())
			for j := range in {
				in[j] = reflect.Zero(m.Type.In(j))
				if m.Type.In(j) == reflect.TypeFor[context.Context]() {
					in[j] = reflect.ValueOf(context.Background())
				}
			}
			var out []reflect.Value
			err := func() (err error) {
				defer func() {
					if r := recover(); r != nil {
						err = fmt.Errorf("passed through to the store: %v", r)
					}
				}()
				if m.Type.IsVariadic() {
					out = v.MethodByName(m.Name).CallSlice(in)
				} else {
					out = v.MethodByName(m.Name).Call(in)
				}
				return nil
			}()
			require.NoError(t, err)
			last, _ := out[len(out)-1].Interface().(error)
			require.True(t, errors.Is(last, crashpoint.ErrCrashed), "%s on a dead queue: %v", m.Name, last)
		})
	}
}
