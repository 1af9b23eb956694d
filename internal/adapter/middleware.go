package adapter

import (
	"fmt"
	"reflect"
)

// CheckMiddleware checks a Fiber Config's LimiterMiddleware m, which is
// set (not a nil interface): a typed nil (a nil pointer, map, func ...)
// would panic on its first call, so it is refused at New, naming the field.
func CheckMiddleware(m any) error {
	v := reflect.ValueOf(m)
	switch v.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Func, reflect.Interface, reflect.Chan:
		if v.IsNil() {
			return fmt.Errorf("limiter: LimiterMiddleware is a nil %v; use FixedWindow{}, SlidingWindow{}, TokenBucket{}, SlidingLog{} or leave it nil for the default", v.Type())
		}
	}
	return nil
}
