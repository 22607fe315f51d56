package config

import "time"

// Seconds is a duration as the configuration spells it: a number of seconds, fractions
// allowed (the keys named *_seconds). YAML decodes it as the plain number it always was;
// code takes it as a time.Duration through Duration, the one conversion.
type Seconds float64

// Duration is s as a time.Duration. Validate bounds every Seconds key, so none overflows.
func (s Seconds) Duration() time.Duration { return time.Duration(float64(s) * float64(time.Second)) }
