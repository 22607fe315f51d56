package config

import (
	"fmt"
	"time"
)

// Seconds is a duration as the configuration spells it: a number of seconds, fractions
// allowed (the keys named *_seconds). YAML decodes it as the plain number it always was;
// code takes it as a time.Duration through Duration, the one conversion.
type Seconds float64

// Duration is s as a time.Duration. Validate bounds every Seconds key, so none overflows.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }

// MustPositive is how a constructor checks a number it takes from the configuration:
// config.Validate refuses a bad value with its key first, so a zero or negative value
// reaching a constructor is a wiring bug (a caller that did not pass the config's value).
// It panics at startup naming the key; constructors keep no second default to fill in.
func MustPositive[T ~int | ~int64 | ~float64](key string, v T) {
	if !(v > 0) {
		panic(fmt.Sprintf("%s is %v: pass the configuration's value (config.Default() has the default); constructors keep no default of their own", key, v))
	}
}
