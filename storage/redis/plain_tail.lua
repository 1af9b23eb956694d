    -- plain_tail.lua: the end of the plain take (see plain_head.lua).
    -- The value is written with the TTL its state needs, as the general
    -- path writes it.
    if plain then
      if value then
        redis.call('SET', key, value, 'PX', px)
      end
      return pack('<BI4I7I7I7', allowed, remaining, reset * step1, retry * step1, counted)
    end
  end
end
